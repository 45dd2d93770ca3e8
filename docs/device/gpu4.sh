#!/bin/bash
# Session-3 GPU calls: make eval LEVEL=1 LIMIT=10 (GPU 0) || LEVEL=2 LIMIT=10 (GPU 1), offline engine,
# with the float64-truth correctness rule and the dot_precision transform. Re-running resumes.
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 KERNELSKILL_CACHE_DIR=$PWD/scratch/kscache3 KERNELSKILL_PATIENCE=1
for d in runner evals graph nodes skills_kb; do ln -sfn ../$d kernelskill/$d; done
mkdir -p $OUT/ev scratch/ev3
KS="python3 -m kernelskill.cli"
left() { echo $(( ${BUDGET:-530} - ($(date +%s) - T0) )); }
A=${A:-1}; B=${B:-2}; LA=${LA:-10}; LB=${LB:-10}
(
  export CUDA_VISIBLE_DEVICES=0
  timeout -s INT $(left) make eval LEVEL=$A LIMIT=$LA GPUS=0 KS="$KS" EVAL_FLAGS="--out scratch/ev3/l$A --rounds 2 --task-timeout 300" > $OUT/ev/l$A.log 2>&1
) &
(
  export CUDA_VISIBLE_DEVICES=1
  timeout -s INT $(left) make eval LEVEL=$B LIMIT=$LB GPUS=1 KS="$KS" EVAL_FLAGS="--out scratch/ev3/l$B --rounds 2 --task-timeout 300" > $OUT/ev/l$B.log 2>&1
) &
wait
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/ev/gpu.txt
python3 -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__,'cuda',torch.version.cuda)" >> $OUT/ev/gpu.txt
tar czf $OUT/ev.tgz scratch/ev3 scratch/kscache3
ls -la $OUT $OUT/ev; du -sh scratch/ev3
