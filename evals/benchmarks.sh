#!/usr/bin/env bash
# Reproduce the tables of docs/benchmarks.md on a CUDA machine (resumable: run it again to continue).
#
#   make benchmarks [KB=path/to/kernelbench-levels] [GPUS=0] [BENCH=bench] [LEVELS="1 2 3"]
#
# 1. the GPU-marked tests                      -> $BENCH/gpu-tests.txt
# 2. the offline engine on the bundled suite   -> $BENCH/suite-l1..3        (--rounds 1)
# 3. with KB set: the offline engine on the KernelBench folders $KB/level1..3
#                                              -> $BENCH/kernelbench-l1..3  (--rounds 1)
# 4. our convolution kernels against cuDNN and torch.compile on every convolution of $KB/level1..2
#    (the bundled suite's levels without KB)  -> $BENCH/bench-conv
#    and each of those tasks whole, with the convolutions' epilogues fused -> $BENCH/bench-whole
# Steps 2 and 3 run each level under the policy settings in ARMS (default "any custom tf32"):
#   any    precision fp32, kernels any     -> suite-lN, kernelbench-lN
#   custom precision fp32, kernels custom  -> suite-lN-custom, kernelbench-lN-custom
#   tf32   precision tf32, kernels any     -> suite-l2-tf32, kernelbench-l2-tf32 (level 2 only)
# and put a level's arms side by side (eval policies)  -> policies-suite-lN.md, policies-kernelbench-lN.md
# EVAL_FLAGS is added to every eval; eager and torch.compile are timed in the same runs, each under its
# eval's precision. Each eval directory's summary.md is the table.
set -u
KS=${KS:-.venv/bin/kernelskill}
PY=${PY:-.venv/bin/python}
BENCH=${BENCH:-bench}
GPUS=${GPUS:-0}
LEVELS=${LEVELS:-1 2 3}
TIMEOUT=${TASK_TIMEOUT:-300}
ARMS=${ARMS:-any custom tf32}
export KERNELSKILL_PATIENCE=${KERNELSKILL_PATIENCE:-1}
mkdir -p "$BENCH"
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'benchmarks need a CUDA GPU')" || exit 2
if [ ! -s "$BENCH/gpu-tests.txt" ]; then
  "$PY" -m pytest -m gpu -rsP -q > "$BENCH/gpu-tests.txt" 2>&1
  tail -1 "$BENCH/gpu-tests.txt"
fi
arm_flags() {  # ARM LEVEL -> the directory suffix and the policy flags, or nothing when the arm skips the level
  case "$1" in
    any) echo "|--precision fp32 --kernels any" ;;
    custom) echo "-custom|--precision fp32 --kernels custom" ;;
    tf32) if [ "$2" = 2 ]; then echo "-tf32|--precision tf32 --kernels any"; fi ;;
    *) echo "unknown arm '$1' in ARMS (any, custom, tf32)" >&2; exit 2 ;;
  esac
}
run_arms() {  # NAME ROUNDS EVAL-ARGS...: every arm of ARMS on one level
  local name=$1 rounds=$2 level=$3; shift 3
  for A in $ARMS; do
    spec=$(arm_flags "$A" "$level") || exit 2
    [ -n "$spec" ] || continue
    "$KS" eval "$@" --engine offline --rounds "$rounds" --task-timeout "$TIMEOUT" --retry-timeouts \
      --gpus "$GPUS" --out "$BENCH/$name${spec%%|*}" ${spec#*|} ${EVAL_FLAGS:-} || exit $?
  done
  local dirs=()  # the level's arms side by side, each against its own baselines
  for A in $ARMS; do
    spec=$(arm_flags "$A" "$level")
    if [ -n "$spec" ] && [ -f "$BENCH/$name${spec%%|*}/eval.json" ]; then dirs+=("$BENCH/$name${spec%%|*}"); fi
  done
  if [ ${#dirs[@]} -gt 1 ]; then "$KS" eval policies "${dirs[@]}" > "$BENCH/policies-$name.md" || exit $?; fi
}
for L in $LEVELS; do
  run_arms "suite-l$L" 1 "$L" --level "$L"
done
if [ -n "${KB:-}" ]; then
  for L in $LEVELS; do
    run_arms "kernelbench-l$L" 1 "$L" --tasks "$KB/level$L"
  done
fi
if [ -n "${KB:-}" ]; then CONV_TASKS="$KB/level1 $KB/level2"; else CONV_TASKS=""; fi
"$PY" -m kernelskill.evals.bench_conv ${CONV_TASKS:+--tasks $CONV_TASKS} --out "$BENCH/bench-conv" || exit $?
"$PY" -m kernelskill.evals.bench_conv ${CONV_TASKS:+--tasks $CONV_TASKS} --whole --out "$BENCH/bench-whole" || exit $?
"$PY" -m kernelskill.evals.bench_conv ${CONV_TASKS:+--tasks $CONV_TASKS} --static --out "$BENCH/bench-static" || exit $?
"$PY" -m kernelskill.evals.bench_conv ${CONV_TASKS:+--tasks $CONV_TASKS} --static --config '{"EPI_SPLIT": 1}' \
    --out "$BENCH/bench-static-whole-tile" || exit $?
"$PY" -m kernelskill.evals.bench_conv ${CONV_TASKS:+--tasks $CONV_TASKS} --compile-time --out "$BENCH/compile-time" \
    > /dev/null || exit $?
"$PY" -m kernelskill.evals.bench_conv --tuning --out "$BENCH/conv-tuning" > /dev/null || exit $?
echo "tables: $BENCH/*/summary.md, $BENCH/policies-*.md, $BENCH/bench-conv/bench_conv.md, $BENCH/bench-whole/bench_whole.md, $BENCH/bench-static*/bench_static.md, $BENCH/compile-time/compile_time.md, $BENCH/conv-tuning/tuning.md"
