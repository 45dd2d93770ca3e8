#!/bin/bash
# Session 9 call 3 (run as scratch/gpu9.sh with scratch/flash_sweep.py, the first form of docs/device/flash_sweep.py:
# same configurations, precisions, timing and error check), carry ["scratch/flash_sweep.py", "scratch/gpu9.sh"].
# Sweeps ks_flash_attention_fwd's launch configurations on two shapes per GPU; results in docs/data/flash-sweep-h200.jsonl.
cd "$(dirname "$0")/../.."
SWEEP=${SWEEP:-docs/device/flash_sweep.py}
mkdir -p $OUT
( export CUDA_VISIBLE_DEVICES=0; python3 $SWEEP 8 16 2048 128 1 230 > $OUT/sweep_l1_57.jsonl 2>$OUT/err0.txt;
  python3 $SWEEP 32 8 512 64 0 110 > $OUT/sweep_d64_512.jsonl 2>>$OUT/err0.txt ) &
( export CUDA_VISIBLE_DEVICES=1; python3 $SWEEP 16 16 1024 64 0 230 > $OUT/sweep_l1_56.jsonl 2>$OUT/err1.txt;
  python3 $SWEEP 8 16 2048 128 0 110 > $OUT/sweep_d128_2048_nc.jsonl 2>>$OUT/err1.txt ) &
wait
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
python3 -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__,'cuda',torch.version.cuda)" >> $OUT/gpu.txt
wc -l $OUT/*.jsonl; tail -n 3 $OUT/err*.txt
