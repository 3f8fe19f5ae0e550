#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the gks benchmark suite after setting the machine up (scripts/setup.sh): every op x
# backend x dtype x bench shape beside its peers, results in results/bench.json. On a
# machine without a GPU it says so and runs the interpreter correctness sweep instead.
# Extra arguments go to `python -m gks bench` (e.g. --kernel rmsnorm instead of --all).
set -euo pipefail
cd "$(dirname "$0")/.."
GKS_CUDA_ARCHS=${GKS_CUDA_ARCHS:-80;90a} scripts/setup.sh
ARGS=("$@")
[ ${#ARGS[@]} -eq 0 ] && ARGS=(--all --with-references)
"${GKS_VENV:-.venv}/bin/python" -m gks bench "${ARGS[@]}" --json results/bench.json
