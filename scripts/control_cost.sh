#!/usr/bin/env bash
# The control-plane cost table on a multi-GPU machine (nvidia-h200-x2 or larger): every plane and ideal
# (record, then replay with no transport) at tp=2, async scheduling on and off, the latency workloads (and
# bench with WORKLOADS=...), 3 repeats; then the planes alone (workload=broadcast) at the same message
# sizes; then each plane's exposed cost (its decode step and TPOT minus ideal's, harness.analyze).
#   MODELS=qwen3-0.6b bash scripts/control_cost.sh
# By default one Hydra sweep per model reuses the engine across workloads and async settings
# (scripts/multi_gpu_sweep.sh, harness/engine_cache.py). Options:
#   PER_PROCESS=1  one harness process per plane instead (each bounded by PLANE_S seconds, the table by
#                  TABLE_S); how results/h200x2/control.csv was measured, with
#                  MODELS=qwen3-0.6b WORKLOADS=latency PER_PROCESS=1 SIM_NODES=1
#   SIM_NODES=1    also tp=2 on two simulated nodes, one GPU each (scripts/sim_nodes.sh, control=hybrid,
#                  latency batch 1) -> $OUT/sim_nodes.csv
#   BROADCAST=0    skip the planes-alone (workload=broadcast) part
# Other knobs: CONTROLS, TPS, WORKLOADS, ASYNC, REPEAT, ITER, CSV (control.csv), BROADCAST_S. Logs: $OUT/logs/.
set -uo pipefail
source scripts/device_env.sh
mkdir -p "$OUT/logs"
CONTROLS=${CONTROLS:-ideal,shm,queue,pipe,gloo,ring,zmq,hybrid}; MODELS=${MODELS:-qwen3-0.6b,qwen3-8b}; CSV=${CSV:-control.csv}
if [ "${PER_PROCESS:-0}" = 1 ]; then
  for model in ${MODELS//,/ }; do
    for c in ${CONTROLS//,/ }; do
      [ $SECONDS -gt ${TABLE_S:-300} ] && { echo "table: $model $c not run (time)"; continue; }
      log="$OUT/logs/control_${model}_$c.log"
      timeout ${PLANE_S:-70} python3 -m harness -m control=$c tp=${TPS:-2} model=$model \
        workload=${WORKLOADS:-latency,latency-b8} llm.async_scheduling=${ASYNC:-true,false} \
        ++workload.iterations=${ITER:-5} repeat=${REPEAT:-3} device=cuda progress=false results_dir="$OUT" \
        results_file="$CSV" > "$log" 2>&1
      echo "$model $c: exit $? at $SECONDS s, $(grep -c '^\[ok\]' "$log") ok rows"
    done
  done
else
  MODELS=$MODELS CONTROLS=$CONTROLS TPS=${TPS:-2} WORKLOADS=${WORKLOADS:-latency,latency-b8} ASYNC=${ASYNC:-true,false} \
    TAG=${TAG:-control} CSV=$CSV bash scripts/multi_gpu_sweep.sh
fi
if [ "${BROADCAST:-1}" = 1 ]; then
  timeout ${BROADCAST_S:-120} python3 -m harness -m workload=broadcast control=shm,queue,pipe,gloo,ring,zmq,hybrid tp=2 \
    "workload.decode_batches=[1,8]" "workload.prefill_batches=[]" "workload.raw_bytes=[256]" repeat=3 progress=false \
    results_dir="$OUT" results_file=broadcast.csv > "$OUT/logs/broadcast.log" 2>&1
  echo "broadcast: exit $? after $SECONDS s"
fi
if [ "${SIM_NODES:-0}" = 1 ]; then
  LOGDIR="$OUT/logs" NODES=2 NPROC=1 PORT=29650 timeout ${SIM_S:-60} bash scripts/sim_nodes.sh -m harness \
    control=hybrid tp=2 model=qwen3-0.6b workload=latency ++workload.iterations=5 repeat=2 device=cuda \
    progress=false results_dir="$OUT" results_file=sim_nodes.csv > /dev/null 2>&1
  echo "sim nodes: exit $? at $SECONDS s"
fi
rm -f "$OUT"/*.lock
python3 -m harness.analyze "$OUT/$CSV" 2>&1 | grep -A30 "exposed cost" | cut -c1-180
