#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU-machine check: build gks, run the C++ and Python test suites, run the CUDA ops
# under compute-sanitizer (memcheck, racecheck, synccheck), run the benchmark with its
# peers, and print a short summary table last. Logs and JSON go to OUTDIR.
#
#   scripts/gpu_check.sh OUTDIR [bench args...]     (default bench args: --all --with-references)
#
# Environment: GKS_CUDA_ARCHS (default 90a here, for build time; CI builds 80;90a),
# GKS_CHECK_STEPS (default "build ctest example pytest sanitize bench"; also available:
# sanitize-suite (the pytest suite under memcheck and racecheck, GKS_SANITIZE_PYTEST_ARGS,
# GKS_SANITIZE_SUITE_TOOLS), serve-suite (gks serve and the pre-commit sweep through
# gks bench-suite, GKS_SUITE_ARGS), pyexample
# (examples/python/transformer_block.py and train_block.py), ceilings (gks roofline --measure), autotune (every
# tunable kernel, see GKS_AUTOTUNE below), profile (gks profile under ncu, GKS_PROFILE_ARGS)),
# GKS_FAMILIES (build only these kernel families, e.g. "norms;softmax"), GKS_PYTEST_ARGS
# (default "tests"; with pytest-xdist's -n, add --dist loadgroup so the large-memory cases
# share one worker), GKS_SANITIZE_ARGS (arguments of scripts/sanitize_cases.py),
# GKS_SANITIZE_TOOLS (default "memcheck racecheck synccheck"), GKS_SANITIZE_JOBS (sanitizer
# processes at once, default 8), GKS_RACECHECK_SHARDS (racecheck splits each op's sweep into
# this many processes, default 1: its sweeps of attention, the GEMMs and the norms each
# outrun 330 s in one process),
# GKS_STEP_TIMEOUT (seconds any one step may run, default 3600: a step past it is stopped so
# the later steps and the summary still run), GKS_BENCH_EACH (e.g. "sgemm gemm": the bench
# step runs once per op listed, each with the bench args, its own time limit, log
# bench-OP.log and JSON bench-OP.json; an entry OP@SHAPE,SHAPE,... benches only those
# shapes, e.g. "rmsnorm@1x4096,65536x2560"), GKS_AUTOTUNE (the "autotune" step's BACKEND:KERNEL
# list, default every tunable kernel; the cache goes to OUTDIR/autotune.json, which is what
# gks/runtime/tuned/nvidia-h200.json is made of).
# Wheels in .whl/ (apache-tvm-ffi and the server extra, absent from the GPU image; made by
# scripts/gpu_wheels.sh) are installed first, and the peers' halves in .peers/ unpacked.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_check.sh OUTDIR [bench args...]}
shift
BENCH_ARGS=("$@")
[ ${#BENCH_ARGS[@]} -eq 0 ] && BENCH_ARGS=(--all --with-references)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
mkdir -p "$OUT"
STEPS=${GKS_CHECK_STEPS:-"build ctest example pytest sanitize bench"}
ARCHS=${GKS_CUDA_ARCHS:-90a}
PY=${PYTHON:-python3}
BUILD=$ROOT/build-gpu
export PYTHONUNBUFFERED=1 GKS_LIBRARY=$BUILD/libgks_tvm_ffi.so
# JAX would otherwise take 75% of the GPU's memory in each process (pytest -n workers too).
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}

if compgen -G ".whl/*.whl" > /dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gks-site .whl/*.whl \
    || echo "gpu_check: installing .whl/ failed (above)"
fi
# Installed by an earlier call of the same lease too.
[ -d /tmp/gks-site ] && export PYTHONPATH=/tmp/gks-site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
# The peers ../shared/tools/peer-wheels.sh packs (FA4, FA3, QuACK, Liger) travel in two halves,
# one a call (carry .peers/a, then .peers/b within the machine's warm time): each call unpacks
# the half it carries, and every call of the lease then sees what is installed.
for half in a b; do
  [ -f ".peers/$half/unpack.sh" ] && { bash ".peers/$half/unpack.sh" > "$OUT/peers-$half.log" 2>&1 || tail -3 "$OUT/peers-$half.log"; }
done
[ -d /tmp/peer-site ] && export PYTHONPATH=/tmp/peer-site:/tmp/peer-site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH

declare -a SUMMARY
run_step() {  # name, command...: runs it, logs to $OUT/name.log, records status and time
  local name=$1; shift
  case " $STEPS " in *" $name "*) ;; *) return 0 ;; esac
  local t0=$SECONDS
  echo "== $name: $*" | tee -a "$OUT/steps.log"
  timeout "${GKS_STEP_TIMEOUT:-3600}" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local tail_line
  tail_line=$(grep -E "passed|failed|FAILED|error|Error|tests passed|ERROR SUMMARY" "$OUT/$name.log" | tail -1 | cut -c1-90)
  SUMMARY+=("$(printf '%-10s %-6s %5ss  %s' "$name" "$([ $rc -eq 0 ] && echo ok || echo FAIL:$rc)" "$((SECONDS - t0))" "$tail_line")")
  [ $rc -eq 0 ] || tail -30 "$OUT/$name.log"
  return $rc
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
GTEST_ARG=()
[ -d .gtest ] && GTEST_ARG=(-DGKS_GTEST_SOURCE_DIR="$ROOT/.gtest")
$PY -c "import tvm_ffi" 2> /dev/null || echo "gpu_check: apache-tvm-ffi is not importable: carry .whl (scripts/gpu_wheels.sh)"
# A configure that failed (tvm-ffi missing) leaves a cache that fails the next one too.
[ -f "$BUILD/CMakeCache.txt" ] && [ ! -f "$BUILD/build.ninja" ] && rm -f "$BUILD/CMakeCache.txt"
run_step build bash -c "cmake -S . -B '$BUILD' -G Ninja -DGKS_CUDA_ARCHS='$ARCHS' -DGKS_FAMILIES='${GKS_FAMILIES:-}' -DPython_EXECUTABLE=\$(command -v $PY) ${GTEST_ARG[*]} && cmake --build '$BUILD' -j 16" || { printf '%s\n' "${SUMMARY[@]}"; exit 1; }
run_step ctest ctest --test-dir "$BUILD" --output-on-failure
run_step example "$BUILD/examples/cpp/rmsnorm_example"
run_step pytest $PY -m pytest ${GKS_PYTEST_ARGS:-tests} -q -p no:cacheprovider --junitxml="$OUT/pytest.xml"
# compute-sanitizer's memcheck, racecheck (shared-memory hazards) and synccheck (barrier
# misuse), each over the example, the C++ tests and every CUDA kernel config on the
# registry's small test shapes (scripts/sanitize_cases.py --each-config). GKS_SANITIZE_JOBS
# processes share the GPU (default 8): the C++ tests in gtest shards and one process per
# op; each writes OUTDIR/sanitize/TOOL-PART.log, and the step fails if any part does.
SAN="compute-sanitizer --error-exitcode 1 --print-limit 20"
export SAN OUT BUILD PY SAN_JOBS=${GKS_SANITIZE_JOBS:-8}
sanitize_part() {  # tool part command...: one part under the tool, logged; a failure leaves a mark
  local tool=$1 part=$2 t0=$SECONDS; shift 2
  local log="$OUT/sanitize/$tool-$part.log"
  "$@" > "$log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || touch "$OUT/sanitize/failed"
  printf '%-9s %-22s %-7s %5ss  %s\n' "$tool" "$part" "$([ $rc -eq 0 ] && echo ok || echo FAIL:$rc)" \
    "$((SECONDS - t0))" "$(grep -E 'ERROR SUMMARY|FAILED|Error' "$log" | tail -1 | cut -c1-70)"
}
sanitize_all() {  # every tool over every part, SAN_JOBS parts at a time
  mkdir -p "$OUT/sanitize" && rm -f "$OUT/sanitize/failed"
  local ops tool i op
  ops=$($PY scripts/sanitize_cases.py --list) || return 1
  for tool in ${GKS_SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
    local -a parts=("example $SAN --tool $tool $BUILD/examples/cpp/rmsnorm_example")
    for i in $(seq 0 $((SAN_JOBS - 1))); do
      parts+=("cpp$i env GTEST_TOTAL_SHARDS=$SAN_JOBS GTEST_SHARD_INDEX=$i $SAN --tool $tool --require-cuda-init no $BUILD/gks_cpp_tests")
    done
    local shards=1 s
    [ "$tool" = racecheck ] && shards=${GKS_RACECHECK_SHARDS:-1}
    for op in $ops; do
      for s in $(seq 0 $((shards - 1))); do
        parts+=("$op$([ "$shards" -gt 1 ] && echo ".$s") $SAN --tool $tool $PY scripts/sanitize_cases.py --each-config --kernel $op --shard $s/$shards ${GKS_SANITIZE_ARGS:-}")
      done
    done
    for part in "${parts[@]}"; do
      while [ "$(jobs -rp | wc -l)" -ge "$SAN_JOBS" ]; do wait -n; done
      # shellcheck disable=SC2086  # each part is a word list
      sanitize_part "$tool" $part &
    done
    wait
  done
  [ ! -f "$OUT/sanitize/failed" ]
}
export -f sanitize_part sanitize_all
run_step sanitize bash -c sanitize_all
# The Python test suite (or the part GKS_SANITIZE_PYTEST_ARGS names) under each of
# GKS_SANITIZE_SUITE_TOOLS (default memcheck racecheck), the tools side by side, every process
# (the pytest-xdist workers too) instrumented; each tool's log is OUTDIR/sanitize/TOOL-suite.log.
# Only gks's own kernels are instrumented (GKS_SANITIZE_SUITE_KERNELS, a compute-sanitizer
# --kernel-name filter, default kns=gks: the mangled names of the gks:: namespace; empty for
# every kernel): racecheck of every kernel, torch's references included, is many times slower
# than memcheck over the same tests.
sanitize_suite() {
  mkdir -p "$OUT/sanitize" && rm -f "$OUT/sanitize/failed"
  local tool filter=()
  [ -n "${GKS_SANITIZE_SUITE_KERNELS-kns=gks}" ] && filter=(--kernel-name "${GKS_SANITIZE_SUITE_KERNELS-kns=gks}")
  for tool in ${GKS_SANITIZE_SUITE_TOOLS:-memcheck racecheck}; do
    # shellcheck disable=SC2086  # the pytest arguments are a word list
    sanitize_part "$tool" suite $SAN --tool "$tool" --target-processes all "${filter[@]}" \
      $PY -m pytest ${GKS_SANITIZE_PYTEST_ARGS:-tests} -q -p no:cacheprovider &
  done
  wait
  [ ! -f "$OUT/sanitize/failed" ]
}
export -f sanitize_suite
run_step sanitize-suite bash -c sanitize_suite
# The benchmark server on this host and the pre-commit sweep through its client (issue 35's
# check): gks serve on a free token and port (its SQLite file OUTDIR/serve.db, its log
# OUTDIR/serve.log), gks bench-suite --server with GKS_SUITE_ARGS (e.g. "--kernel softmax
# --reps 10"), the jobs' results in OUTDIR/suite.json; the server is stopped either way.
serve_suite() {
  export GKS_SERVE_TOKEN
  GKS_SERVE_TOKEN=$($PY -c 'import secrets; print(secrets.token_hex(16))')
  local port=${GKS_SERVE_PORT:-8470} rc
  $PY -m gks serve --db "$OUT/serve.db" --port "$port" > "$OUT/serve.log" 2>&1 &
  local server=$!
  # Stopped by the step's time limit: the server and a job it runs (in a session of its own)
  # go too.
  trap 'kill $server; pkill -f "gks bench --kernel"; exit 124' TERM
  $PY -c "
import sys, time, urllib.request
for _ in range(240):
    try:
        print('server up:', urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=2).read().decode()); sys.exit(0)
    except OSError:
        time.sleep(0.5)
sys.exit('gks serve did not come up; see serve.log')" || { kill $server; return 1; }
  # shellcheck disable=SC2086  # the suite's arguments are a word list
  $PY -m gks bench-suite --server "http://127.0.0.1:$port" ${GKS_SUITE_ARGS:-} --json "$OUT/suite.json"
  rc=$?
  kill $server; wait $server 2> /dev/null
  pkill -f "gks bench --kernel" 2> /dev/null  # a job cut off by the step's time limit
  return $rc
}
export -f serve_suite
run_step serve-suite bash -c serve_suite
run_step pyexample bash -c "$PY examples/python/transformer_block.py && $PY examples/python/train_block.py"
run_step ceilings $PY -m gks roofline --measure
# GKS_AUTOTUNE: backend:op pairs to tune (default: every tunable kernel of every backend).
if [ -n "${GKS_AUTOTUNE:-}" ]; then
  run_step autotune bash -c "for t in $GKS_AUTOTUNE; do $PY -m gks autotune --backend \${t%%:*} --kernel \${t#*:} --cache '$OUT/autotune.json' || exit 1; done"
else
  run_step autotune bash -c "for b in cuda triton pallas; do $PY -m gks autotune --backend \$b --all --cache '$OUT/autotune.json' || exit 1; done"
fi
run_step profile $PY -m gks profile ${GKS_PROFILE_ARGS:---kernel rmsnorm --shape 8192x32768 --dtype bfloat16 --report /tmp/gks-profile-rmsnorm}
if [ -n "${GKS_BENCH_EACH:-}" ]; then
  for entry in $GKS_BENCH_EACH; do  # OP or OP@SHAPE,SHAPE,...: that op on those shapes alone
    op=${entry%%@*} shapes=()
    [ "$entry" != "$op" ] && shapes=(--shapes "${entry#*@}")
    case " $STEPS " in *" bench "*) STEPS="$STEPS bench-$op" ;; esac
    run_step "bench-$op" $PY -m gks bench --kernel "$op" "${shapes[@]}" "${BENCH_ARGS[@]}" --json "$OUT/bench-$op.json"
  done
else
  run_step bench $PY -m gks bench "${BENCH_ARGS[@]}" --json "$OUT/bench.json"
fi

echo
echo "== bench table (full log: bench.log)"
for log in "$OUT"/bench*.log; do [ -f "$log" ] && sed -n '/gks bench/,$p' "$log" | head -200; done
echo
echo "== gks GPU check summary ($(head -2 "$OUT/gpu.txt" | tail -1))"
printf '%s\n' "${SUMMARY[@]}"
# The logs travel as one archive (the device tool returns at most 8 files); JSON stays apart.
(cd "$OUT" && tar czf logs.tgz --remove-files $(ls | grep -v -e '\.json$' -e '^logs.tgz$'))
