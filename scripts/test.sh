#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the gks test suite on this machine after setting it up (scripts/setup.sh): the
# GoogleTest tests through ctest, then pytest. Without a GPU, the CUDA tests skip with the
# reason and Triton / Pallas run in their interpreters. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
VENV=${GKS_VENV:-.venv}
if [ -z "${GKS_SKIP_CUDA_BUILD:-}" ]; then
  "$VENV/bin/ctest" --test-dir build/python --output-on-failure
fi
"$VENV/bin/python" -m pytest tests -q "$@"
