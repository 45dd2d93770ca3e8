#!/bin/bash
# Recorded device call: it ran as scratch/gpu2.sh from the repository root (scratch/ and .whl/ carried).
# Session-2 GPU call 2: offline-engine GPU tests, then make eval LEVEL=1 (GPU 0) || LEVEL=2 (GPU 1).
set -u
cd "$(dirname "$0")/.."
pwd
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 KERNELSKILL_CACHE_DIR=$PWD/scratch/kscache KERNELSKILL_PATIENCE=1
for d in runner evals graph nodes skills_kb; do ln -sfn ../$d kernelskill/$d; done
mkdir -p $OUT/ev scratch/ev
KS="python3 -m kernelskill.cli"
left() { echo $(( ${BUDGET:-550} - ($(date +%s) - T0) )); }
(
  export CUDA_VISIBLE_DEVICES=0
  timeout 200 python3 -m pytest tests/test_offline_gpu.py -p no:cacheprovider -q -x 2>&1 | tail -15 > $OUT/ev/offline_gpu_tests.txt
  timeout -s INT $(left) make eval LEVEL=1 LIMIT=10 GPUS=0 KS="$KS" EVAL_FLAGS="--out scratch/ev/l1 --rounds 2 --task-timeout 300" > $OUT/ev/l1.log 2>&1
) &
(
  export CUDA_VISIBLE_DEVICES=1
  timeout -s INT $(left) make eval LEVEL=2 LIMIT=10 GPUS=1 KS="$KS" EVAL_FLAGS="--out scratch/ev/l2 --rounds 2 --task-timeout 300" > $OUT/ev/l2.log 2>&1
) &
wait
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/ev/gpu.txt
tar czf $OUT/ev.tgz --exclude='checkpoints.sqlite*' scratch/ev scratch/kscache
tar czf $OUT/ck.tgz scratch/ev
ls -la $OUT $OUT/ev; du -sh scratch/ev
