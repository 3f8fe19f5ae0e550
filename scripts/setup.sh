#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sets up a fresh machine for gks: a Python >= 3.12 virtual environment in .venv with the
# pinned toolchain (torch 2.11, triton 3.6, jax 0.11.2: the versions on the H200 machine),
# then builds and installs gks into it in editable mode (CMake + nvcc through
# scikit-build-core), with the GoogleTest tests built alongside for ctest.
#
#   scripts/setup.sh            idempotent; GKS_CUDA_ARCHS (default 80;90a) picks the GPUs
#   GKS_SKIP_CUDA_BUILD=1 scripts/setup.sh   pure-Python install (Triton, Pallas, reference)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${GKS_VENV:-.venv}

find_python() {  # jax 0.11 needs Python >= 3.12
  local c
  for c in "${PYTHON:-}" python3.12 python3.13 python3 /root/.pyenv/versions/3.12*/bin/python3 \
           /root/.pyenv/versions/3.13*/bin/python3; do
    [ -n "$c" ] && command -v "$c" > /dev/null 2>&1 || continue
    if "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2> /dev/null; then
      command -v "$c"; return 0
    fi
  done
  echo "setup.sh: no Python >= 3.12 found (set PYTHON=/path/to/python3.12)" >&2
  return 1
}

if [ ! -x "$VENV/bin/python" ]; then
  "$(find_python)" -m venv "$VENV"
fi
PY=$VENV/bin/python
$PY -m pip install -q --upgrade pip
# numpy < 2.4: Triton 3.6's interpreter converts 1-element arrays with int(), which 2.4 refuses.
$PY -m pip install -q torch==2.11.0 triton==3.6.0 "jax==0.11.2" "jaxlib==0.11.2" "numpy<2.4" \
  apache-tvm-ffi==0.1.15.post2 jax-tvm-ffi==0.1.3 "scikit-build-core>=0.10" ninja "cmake>=3.24" \
  pytest hypothesis rich tqdm matplotlib fastapi uvicorn
export GKS_CUDA_ARCHS=${GKS_CUDA_ARCHS:-80;90a}
echo "setup.sh: building gks for CUDA architectures $GKS_CUDA_ARCHS (this compiles every kernel;"
echo "          about 25 minutes on 2 cores; ninja's [done/total] counter follows)"
# No build isolation: the build uses the pinned apache-tvm-ffi installed above. The build's
# whole output goes to a log; its progress lines are shown as they come.
mkdir -p build
LOG=build/setup-build.log
$PY -m pip install -v --no-build-isolation --no-deps -e . \
  -C cmake.define.GKS_BUILD_TESTS=ON -C build-dir=build/python > "$LOG" 2>&1 &
BUILD_PID=$!
tail -n +1 -f --pid=$BUILD_PID "$LOG" | { grep --line-buffered -E '^ *\[[0-9]+/[0-9]+\] ' || true; }
if ! wait $BUILD_PID; then
  echo "setup.sh: the build failed; the end of $LOG:" >&2
  tail -n 60 "$LOG" >&2
  exit 1
fi
echo "setup.sh: done; activate with: source $VENV/bin/activate"
