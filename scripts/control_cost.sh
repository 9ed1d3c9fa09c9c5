#!/usr/bin/env bash
# The control-plane cost table on a multi-GPU machine (issue 13): every plane and ideal, tp=2, async
# scheduling on and off, the latency workloads (and bench with WORKLOADS=...), 3 repeats, one engine per
# plane (harness/engine_cache.py). Then the planes alone (workload=broadcast) at the same message sizes.
#   MODELS=qwen3-0.6b bash scripts/control_cost.sh
set -uo pipefail
source scripts/device_env.sh
CONTROLS=${CONTROLS:-ideal,shm,queue,pipe,gloo,ring,zmq,hybrid} TPS=${TPS:-2} WORKLOADS=${WORKLOADS:-latency,latency-b8} \
  ASYNC=${ASYNC:-true,false} TAG=${TAG:-control} CSV=${CSV:-control.csv} bash scripts/multi_gpu_sweep.sh
timeout ${BROADCAST_S:-120} python3 -m harness -m workload=broadcast control=shm,queue,pipe,gloo,ring,zmq,hybrid tp=2 \
  "workload.decode_batches=[1,8]" "workload.prefill_batches=[]" "workload.raw_bytes=[256]" repeat=3 progress=false \
  results_dir="$OUT" results_file=broadcast.csv > "$OUT/logs/broadcast.log" 2>&1
echo "broadcast: exit $? after $SECONDS s"
