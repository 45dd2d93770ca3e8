#!/bin/bash
# Recorded device call (session 4, call 1; ran as scratch/gpu5.sh with .whl/, scratch/lp/ (loadprof.py + four candidate
# files from the session-3 runs), scratch/ev3/l2 and scratch/kscache3 carried).
# BUG, kept as it ran: the L2 eval below passed GPUS=0 inside CUDA_VISIBLE_DEVICES=1, so it ran on GPU 0 next to the
# GPU tests. Its two tasks (L2 09, 10) were discarded and re-run on their own GPU in call 2 (gpu6.sh).
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 KERNELSKILL_CACHE_DIR=$PWD/scratch/kscache3 KERNELSKILL_PATIENCE=1
for d in runner evals graph nodes skills_kb; do ln -sfn ../$d kernelskill/$d; done
mkdir -p $OUT/t $OUT/lp
left() { echo $(( ${BUDGET:-540} - ($(date +%s) - T0) )); }
(
  export CUDA_VISIBLE_DEVICES=0
  timeout $(left) python3 -m pytest -m gpu tests -p no:cacheprovider -q -rs --durations=15 > $OUT/t/gpu_tests.txt 2>&1
  echo "rc=$?" >> $OUT/t/gpu_tests.txt
) &
(
  export CUDA_VISIBLE_DEVICES=1
  # scratch/lp/loadprof.py = docs/device/loadprof.py
  timeout 240 python3 scratch/lp/loadprof.py 1,8 scratch/lp/seed_conv.py scratch/lp/prec_linear.py scratch/lp/sweep_conv.py scratch/lp/sweep_cnn.py > $OUT/lp/loadprof.txt 2>&1
  timeout -s INT $(left) make eval LEVEL=2 LIMIT=10 GPUS=0 KS="python3 -m kernelskill.cli" EVAL_FLAGS="--out scratch/ev3/l2 --rounds 2 --task-timeout 300" > $OUT/lp/l2.log 2>&1
) &
wait
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/t/gpu.txt
python3 -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__,'cuda',torch.version.cuda)" >> $OUT/t/gpu.txt
tar czf $OUT/ev.tgz scratch/ev3/l2
ls -la $OUT
