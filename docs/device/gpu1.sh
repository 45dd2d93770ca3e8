#!/bin/bash
# Recorded device call: it ran as scratch/gpu1.sh from the repository root (scratch/ and .whl/ carried).
# Session-2 GPU call 1: reviewer re-measure (GPU 0) || compiler-seed fixtures + offline smoke (GPU 1).
set -u
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 KERNELSKILL_CACHE_DIR=/tmp/kscache
for d in runner evals graph nodes skills_kb; do ln -sfn ../$d kernelskill/$d; done
python3 -c "import langgraph, kernelskill.graph.builder; print('imports ok')" || exit 4
mkdir -p $OUT/r $OUT/s
(
  export CUDA_VISIBLE_DEVICES=0
  timeout 330 python3 -m pytest tests/test_reviewer_gpu.py -p no:cacheprovider -q -x 2>&1 | tail -30 > $OUT/r/gpu_tests.txt
  timeout 200 python3 -m kernelskill.evals.bench_reviewer --out $OUT/r --per-level 0 > $OUT/r/bench.log 2>&1
) &
(
  export CUDA_VISIBLE_DEVICES=1
  for spec in level1/26_layer_norm:default level2/01_linear_gelu_scale:default level2/01_linear_gelu_scale:triton level3/01_mlp:default; do
    t=${spec%%:*}; v=${spec##*:}; n=$(basename $t)_$v
    echo "{\"task_path\": \"$PWD/evals/tasks/$t.py\", \"variant\": \"$v\"}" > /tmp/req_$n.json
    timeout 200 python3 -m kernelskill.runner.inductor_seed /tmp/req_$n.json $OUT/s/cap_$n.json > $OUT/s/cap_$n.log 2>&1
    python3 -c "import json,sys; d=json.load(open('$OUT/s/cap_$n.json')); print('$n', d['ok'], d.get('error'), d.get('capture',{}).get('heavy_extern_calls'), d.get('capture',{}).get('compile_s'))" >> $OUT/s/summary.txt 2>&1
  done
  for t in level1/26_layer_norm level2/01_linear_gelu_scale; do
    timeout 240 python3 -m kernelskill.cli optimize evals/tasks/$t.py --rounds 2 --runs-dir /tmp/runs > $OUT/s/opt_$(basename $t).log 2>&1
    echo "optimize $t rc=$?" >> $OUT/s/summary.txt
  done
) &
wait
cp -r /tmp/runs $OUT/s/runs 2>/dev/null
cd $OUT && tar czf s.tgz s && rm -rf s && tar czf r.tgz r && ls -la
