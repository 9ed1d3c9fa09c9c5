#!/usr/bin/env bash
# The control-plane cost table on a multi-GPU machine (nvidia-h200-x2 or larger): every plane and ideal
# (record, then replay with no transport) at tp=2, async scheduling on and off, the latency workloads (and
# bench with WORKLOADS=...), 3 repeats; then the planes alone (workload=broadcast) at the same message
# sizes; then each plane's exposed cost (its decode step and TPOT minus ideal's, harness.analyze).
#   MODELS=qwen3-0.6b bash scripts/control_cost.sh [extra harness overrides for the table's runs]
# Every plane runs in its own harness process (scripts/multi_gpu_sweep.sh: symmetric memory is set up for a
# process's first engine only), reusing its engine across workloads and async settings. Options:
#   SIM_NODES=1    also tp=2 on two simulated nodes, one GPU each (scripts/sim_nodes.sh, control=hybrid,
#                  latency batch 1) -> $OUT/sim_nodes.csv
#   BROADCAST=0    skip the planes-alone (workload=broadcast) part
# Other knobs: CONTROLS, TPS, WORKLOADS, ASYNC, REPEAT, ITER, CSV (control.csv), JOB_S, TOTAL_S, BROADCAST_S.
# Per-step timings (which steps a worker launched late, and why: python -m harness.step_log): pass
# step_log=true as an extra override; the files go to $OUT/steps/<run_id>.csv.
# (Until 2026-11-30 PER_PROCESS=1 selected this; the other mode, one process per model, is gone: it
# measured NCCL for every plane but the first.) Logs: $OUT/logs/.
set -uo pipefail
source scripts/device_env.sh
require_gpus 2
mkdir -p "$OUT/logs"
CSV=${CSV:-control.csv}
MODELS=${MODELS:-qwen3-0.6b,qwen3-8b} CONTROLS=${CONTROLS:-ideal,shm,queue,pipe,gloo,ring,zmq,hybrid} TPS=${TPS:-2} \
  WORKLOADS=${WORKLOADS:-latency,latency-b8} ASYNC=${ASYNC:-true,false} CSV=$CSV bash scripts/multi_gpu_sweep.sh "$@"
if [ "${BROADCAST:-1}" = 1 ]; then
  timeout --foreground -k 10 ${BROADCAST_S:-120} python3 -m harness -m workload=broadcast control=shm,queue,pipe,gloo,ring,zmq,hybrid tp=2 \
    "workload.decode_batches=[1,8]" "workload.prefill_batches=[]" "workload.raw_bytes=[256]" repeat=3 progress=false \
    results_dir="$OUT" results_file=broadcast.csv > "$OUT/logs/broadcast.log" 2>&1
  echo "broadcast: exit $? after $SECONDS s"
fi
if [ "${SIM_NODES:-0}" = 1 ]; then
  LOGDIR="$OUT/logs" NODES=2 NPROC=1 PORT=29650 timeout --foreground -k 10 ${SIM_S:-60} bash scripts/sim_nodes.sh -m harness \
    control=hybrid tp=2 model=qwen3-0.6b workload=latency ++workload.iterations=5 repeat=2 device=cuda \
    progress=false results_dir="$OUT" results_file=sim_nodes.csv > /dev/null 2>&1
  echo "sim nodes: exit $? at $SECONDS s"
fi
rm -f "$OUT"/*.lock
python3 -m harness.analyze "$OUT/$CSV" 2>&1 | grep -A30 "exposed cost" | cut -c1-180
