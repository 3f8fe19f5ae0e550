#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Downloads, for a GPU machine without a package index (Python 3.12, manylinux x86_64), the
# wheels that scripts/gpu_check.sh installs from .whl/ before it builds: apache-tvm-ffi (the
# Python module's build and runtime need) with torch's DLPack extension, jax-tvm-ffi (which
# registers the CUDA kernels as XLA FFI targets for gks.jax), and the server
# extra (FastAPI, uvicorn) with every dependency resolved, so that `python -m gks serve`
# runs there. About 8 MB; carry .whl in the device call.
#
#   scripts/gpu_wheels.sh [DIR]      (default .whl, in the project root)
set -euo pipefail
DIR=${1:-$(cd "$(dirname "$0")/.." && pwd)/.whl}
mkdir -p "$DIR"
dl() { python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$DIR" "$@"; }
dl --no-deps apache-tvm-ffi==0.1.15.post2 torch-c-dlpack-ext==0.1.5 jax-tvm-ffi==0.1.3
# With their dependencies: FastAPI's (pydantic, starlette, opentelemetry-api, ...) are not
# all in the GPU image, and an older typing_extensions there breaks pydantic.
dl "fastapi>=0.110" "uvicorn>=0.30" typing_extensions
du -sh "$DIR"
