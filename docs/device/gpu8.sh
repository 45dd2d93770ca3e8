#!/bin/bash
# Recorded device calls (session 5; ran as scratch/gpu7.sh / gpu8.sh with .whl/, scratch/evs.tgz (the eval dirs) and
# scratch/kscache3 carried): call 1 `TESTS=tests A=1 B=3 BUDGET=540` (gpu7.sh: the same script with the test path
# fixed to `tests`, run as `TESTS=1`), call 2 `TESTS=tests/test_offline_gpu.py::test_compensated_repair_of_a_long_mat_vec
# A=2 B=3 BUDGET=530`, call 3 `A=1 B=2 BUDGET=510`. Session 6 (run as scratch/gpu8.sh, the same script): call 1
# `TESTS="<2 node ids>" A=3 B=2 BUDGET=530`, call 2 `A=1 B=3 BUDGET=540`, call 3 `A=2 B=1 BUDGET=555`.
# Optional RA / RB: `--rerun` globs for level A / B (set them for one call only: a later call with the same globs
# would start those tasks over again). `-rsP` (since session 6; was -rs) shows the printed timings of passing tests.
# Session 7: calls 1-2 as `TESTS="<4 node ids>" A=1 B=3 RA=... RB=... BUDGET=540`, `A=1 B=3 BUDGET=545`; since then the
# results come back as one tarball per level (l1.tgz, l3.tgz, kscache3.tgz; extract each from the repo root).
# Session 8: call 1 `TESTS=tests/test_offline_gpu.py::test_split_operand_recapture_of_fp32_gemms A=1 B=3
# RA='L1-05*,L1-07*' BUDGET=530`, call 2 `A=1 B=2 RB='<the 17 L2 conv keys>' BUDGET=530`; call 3 ran level 2 alone on
# both GPUs (docs/benchmarks.md "Session 8"). Between calls on a warm machine, untracked files that .gitignore did not
# ignore were deleted there (eval.json, summary.*, superseded/ under scratch/ev3, which only .git/info/exclude
# ignored; runs/ survived as .gitignore names it): /scratch/ is in .gitignore since.
# Session 9: call 1 `TESTS=tests/test_offline_gpu.py::test_flash_attention_recapture_fuses_attention A=2 B=1
# RB='L1-56*,L1-57*' BUDGET=530`, call 2 `TESTS=<same> A=1 B=3 RA='L1-56*,L1-57*' RB='L3-04*,L3-13*' BUDGET=540`,
# call 3 docs/device/gpu9.sh (the flash kernel's launch sweep), call 4 `A=1 B=3 RA='L1-56*,L1-57*' RB='L3-04*' BUDGET=390`.
# GPU tests ($TESTS, pytest paths or node ids) then level A on GPU 0 (cores 0-15) || level B on GPU 1 (cores 16-31).
# Carry: .whl scratch/evs.tgz scratch/gpu7.sh scratch/kscache3   (make evs.tgz: tar czf scratch/evs.tgz scratch/ev3)
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
A=${A:-1}; B=${B:-3}
T0C=""; T1C=""; command -v taskset >/dev/null && { T0C="taskset -c 0-15"; T1C="taskset -c 16-31"; }
(
  export CUDA_VISIBLE_DEVICES=0
  if [ -n "${TESTS:-}" ]; then  # TESTS: pytest node ids
    timeout $(( $(left) - 60 )) $T0C python3 -m pytest -m gpu $TESTS -p no:cacheprovider -q -rsP --durations=10 > $OUT/ev/gpu_tests.txt 2>&1
    echo "rc=$?" >> $OUT/ev/gpu_tests.txt
  fi
  timeout -s INT $(left) $T0C make eval LEVEL=$A LIMIT=0 GPUS=0 KS="$KS" EVAL_FLAGS="--out scratch/ev3/l$A --rounds 2 --task-timeout 300 --retry-timeouts${RA:+ --rerun $RA}" > $OUT/ev/l$A.log 2>&1
) &
(
  export CUDA_VISIBLE_DEVICES=1
  timeout -s INT $(left) $T1C make eval LEVEL=$B LIMIT=0 GPUS=1 KS="$KS" EVAL_FLAGS="--out scratch/ev3/l$B --rounds 2 --task-timeout 300 --retry-timeouts${RB:+ --rerun $RB}" > $OUT/ev/l$B.log 2>&1
) &
wait
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/ev/gpu.txt
python3 -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__,'cuda',torch.version.cuda)" >> $OUT/ev/gpu.txt
for d in l$A l$B; do tar czf $OUT/$d.tgz scratch/ev3/$d; done; tar czf $OUT/kscache3.tgz scratch/kscache3  # one per level (session 7: 22.6 MB in one did not come back)
# session 8: an 18 MB level tarball did not come back either; larger ones come back in 15 MB parts
# (NAME.tgz.part00, part01, ...: extract with `cat NAME.tgz.part* | tar xz`)
for f in $OUT/*.tgz; do [ "$(stat -c %s "$f")" -gt 15000000 ] && split -b 15000000 -d "$f" "$f.part" && rm "$f"; done
ls -la $OUT $OUT/ev
