#!/usr/bin/env bash
# The multi-GPU sweep (nvidia-h200-x2 and larger): per model one Hydra sweep over control x tp x workload x
# async scheduling, the engine reused across workloads and async settings (harness/engine_cache.py).
#   MODELS=qwen3-0.6b,qwen3-8b CONTROLS=ideal,shm,queue,pipe,gloo,ring TPS=1,2 WORKLOADS=latency,latency-b8,bench \
#   ASYNC=true,false REPEAT=3 ITER=5 bash scripts/multi_gpu_sweep.sh [extra harness overrides]
# ITER: iterations of the latency workloads (128 tokens each; 20 by default in conf/, 5 here to fit a lease).
# Rows go to $OUT/${CSV:-runs.csv}, each sweep's log to $OUT/logs/.
set -uo pipefail
source scripts/device_env.sh
mkdir -p "$OUT/logs"
N=$(python3 -c "import torch; print(torch.cuda.device_count())")
TPS=${TPS:-$(python3 -c "print(','.join(str(t) for t in (1, 2, 4, 8) if t <= $N))")}
MODELS=${MODELS:-qwen3-0.6b,qwen3-8b}
for model in ${MODELS//,/ }; do
  log="$OUT/logs/sweep_${model}_${TAG:-run}.log"
  timeout ${SWEEP_S:-590} python3 -m harness -m control=${CONTROLS:-ideal,shm,queue,pipe,gloo,ring} tp=$TPS \
    model=$model workload=${WORKLOADS:-latency,latency-b8,bench} llm.async_scheduling=${ASYNC:-true,false} \
    ++workload.iterations=${ITER:-5} repeat=${REPEAT:-3} device=cuda progress=false results_dir="$OUT" \
    results_file=${CSV:-runs.csv} "$@" > "$log" 2>&1
  echo "$model: exit $? after $SECONDS s; $(grep -c '^\[ok\]' "$log") ok rows, $(grep -c '^\[failed\]' "$log") failed"
done
rm -f "$OUT"/*.lock
