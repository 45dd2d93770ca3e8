#!/bin/bash
# Recorded device calls (session 4, calls 2-3; ran as scratch/gpu6.sh with .whl/, scratch/evs.tgz (the eval dirs) and
# scratch/kscache3 carried): call 2 `A=1 B=2 BUDGET=540`, call 3 `A=3 B=1 TESTS=1 BUDGET=555`.
# Session-4 GPU calls 2-3: resume the eval dirs (spare workers warmed with Inductor's imports).
# A, B: the levels for GPU 0 and GPU 1. Re-running resumes.
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
tar xzf scratch/evs.tgz || exit 5
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 KERNELSKILL_CACHE_DIR=$PWD/scratch/kscache3 KERNELSKILL_PATIENCE=1
for d in runner evals graph nodes skills_kb; do ln -sfn ../$d kernelskill/$d; done
mkdir -p $OUT/ev
KS="python3 -m kernelskill.cli"
left() { echo $(( ${BUDGET:-540} - ($(date +%s) - T0) )); }
A=${A:-1}; B=${B:-2}
(
  export CUDA_VISIBLE_DEVICES=0
  timeout -s INT $(left) make eval LEVEL=$A LIMIT=0 GPUS=0 KS="$KS" EVAL_FLAGS="--out scratch/ev3/l$A --rounds 2 --task-timeout 300" > $OUT/ev/l$A.log 2>&1
) &
(
  export CUDA_VISIBLE_DEVICES=1
  [ -n "${TESTS:-}" ] && timeout 150 python3 -m pytest tests/test_reviewer_gpu.py tests/test_reviewer.py -k "spread or spare" -p no:cacheprovider -q -rs > $OUT/ev/tests.txt 2>&1
  timeout -s INT $(left) make eval LEVEL=$B LIMIT=0 GPUS=1 KS="$KS" EVAL_FLAGS="--out scratch/ev3/l$B --rounds 2 --task-timeout 300" > $OUT/ev/l$B.log 2>&1
) &
wait
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/ev/gpu.txt
python3 -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__,'cuda',torch.version.cuda)" >> $OUT/ev/gpu.txt
tar czf $OUT/ev.tgz scratch/ev3/l$A scratch/ev3/l$B scratch/kscache3
ls -la $OUT $OUT/ev
