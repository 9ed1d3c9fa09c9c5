#!/usr/bin/env bash
# A/B of the paged-decode launch, end to end, in one device call: the harness on this tree (block_n 64,
# the engine's launch since session 6) and on a copy of it with the previous launch (block_n 32), arms
# interleaved, rows tagged tile_new / tile_old in $OUT/${CSV:-tile_ab.csv}; then the medians by arm.
#   MODELS=qwen3-8b TPS=1,2 WORKLOADS=bench REPEAT=3 bash scripts/decode_tile_ab.sh [extra harness overrides]
set -uo pipefail
source scripts/device_env.sh
require_gpus 1
R=$PWD; OLD=/tmp/tile_old; CSV=${CSV:-tile_ab.csv}; TPS=${TPS:-1}
w=${WORKLOADS:-bench}; m=${MODELS:-qwen3-0.6b}
check_overrides workload=${w%% *} model=${m%% *} tp=${TPS%%,*} device=cuda control=shm "$@"
rm -rf $OLD && mkdir $OLD && cp -r engine harness backends conf scripts pyproject.toml $OLD/
sed -i 's/block_n: int = 64/block_n: int = 32/' $OLD/engine/layers/paged_decode.py
grep -q "block_n: int = 32" $OLD/engine/layers/paged_decode.py || { echo "the old launch was not set"; exit 1; }
for model in ${MODELS:-qwen3-0.6b}; do
  timeout --foreground -k 10 300 python3 -m harness.checkpoint $model > /dev/null 2>&1 || { echo "$model: preset failed"; continue; }
  for w in ${WORKLOADS:-bench}; do for tp in ${TPS//,/ }; do for arm in new old; do
    d=$R; [ $arm = old ] && d=$OLD
    in_tree $d timeout --foreground -k 10 ${JOB_S:-200} python3 -m harness workload=$w model=$model tp=$tp \
      device=cuda control=shm repeat=${REPEAT:-3} progress=false results_dir="$OUT" results_file=$CSV tag=tile_$arm "$@" \
      > "$OUT/tile_${model}_${w}_tp${tp}_$arm.log" 2>&1
    echo "$model $w tp=$tp $arm: exit $? at $SECONDS s"
  done; done; done
done
python3 -c "
import pandas as pd; d = pd.read_csv('$OUT/$CSV'); d = d[d.status == 'ok']
print(d.groupby(['model', 'workload', 'tp', 'tag'])[['output_tok_s', 'tpot_ms_p50', 'decode_step_ms_p50']]
      .agg(['median', 'min', 'max']).round(3).to_string())"
rm -f "$OUT"/*.lock
