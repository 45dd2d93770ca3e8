#!/usr/bin/env bash
# Reproduce the tables of docs/benchmarks.md on a CUDA machine (resumable: run it again to continue).
#
#   make benchmarks [KB=path/to/kernelbench-levels] [GPUS=0] [BENCH=bench] [LEVELS="1 2 3"]
#
# 1. the GPU-marked tests                      -> $BENCH/gpu-tests.txt
# 2. the offline engine on the bundled suite   -> $BENCH/suite-l1..3        (--rounds 2)
# 3. with KB set: the offline engine on the KernelBench folders $KB/level1..3
#                                              -> $BENCH/kernelbench-l1..3  (--rounds 1)
# 4. our convolution kernels against cuDNN and torch.compile on every convolution of $KB/level1..2
#    (the bundled suite's levels without KB)  -> $BENCH/bench-conv
# Every eval uses the default policies (precision fp32, kernels any) unless EVAL_FLAGS says otherwise;
# eager and torch.compile are timed in the same runs. Each eval directory's summary.md is the table.
set -u
KS=${KS:-.venv/bin/kernelskill}
PY=${PY:-.venv/bin/python}
BENCH=${BENCH:-bench}
GPUS=${GPUS:-0}
LEVELS=${LEVELS:-1 2 3}
TIMEOUT=${TASK_TIMEOUT:-300}
export KERNELSKILL_PATIENCE=${KERNELSKILL_PATIENCE:-1}
mkdir -p "$BENCH"
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'benchmarks need a CUDA GPU')" || exit 2
if [ ! -s "$BENCH/gpu-tests.txt" ]; then
  "$PY" -m pytest -m gpu -rsP -q > "$BENCH/gpu-tests.txt" 2>&1
  tail -1 "$BENCH/gpu-tests.txt"
fi
for L in $LEVELS; do
  "$KS" eval --level "$L" --engine offline --rounds 2 --task-timeout "$TIMEOUT" --retry-timeouts \
    --gpus "$GPUS" --out "$BENCH/suite-l$L" ${EVAL_FLAGS:-} || exit $?
done
if [ -n "${KB:-}" ]; then
  for L in $LEVELS; do
    "$KS" eval --tasks "$KB/level$L" --engine offline --rounds 1 --task-timeout "$TIMEOUT" --retry-timeouts \
      --gpus "$GPUS" --out "$BENCH/kernelbench-l$L" ${EVAL_FLAGS:-} || exit $?
  done
fi
if [ -n "${KB:-}" ]; then CONV_TASKS="$KB/level1 $KB/level2"; else CONV_TASKS=""; fi
"$PY" -m kernelskill.evals.bench_conv ${CONV_TASKS:+--tasks $CONV_TASKS} --out "$BENCH/bench-conv" || exit $?
echo "tables: $BENCH/*/summary.md, $BENCH/bench-conv/bench_conv.md"
