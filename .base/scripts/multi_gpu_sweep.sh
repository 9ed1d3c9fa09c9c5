#!/usr/bin/env bash
# The multi-GPU sweep (nvidia-h200-x2 and larger): model x tp x control plane, each over the workloads and
# async settings, repeated. One harness process per (model, tp, plane): PyTorch sets symmetric memory up
# for a process's first engine only (engine/layers/all_reduce.py), so a second tp=2 engine in one process
# would measure NCCL. Inside a process the engine is reused across workloads and async settings
# (harness/engine_cache.py). tp=1 has no workers, so it runs once per model (with the first plane that
# is not ideal).
#   MODELS=qwen3-0.6b,qwen3-8b CONTROLS=ideal,shm,queue,pipe,gloo,ring,zmq,hybrid TPS=1,2 \
#   WORKLOADS=latency,latency-b8,bench ASYNC=true REPEAT=3 ITER=5 bash scripts/multi_gpu_sweep.sh [overrides]
# ITER: iterations of the latency workloads (128 tokens each; 20 by default in conf/, 5 here to fit a lease).
# Time limits (s): JOB_S bounds each process (default 300; killed 10 s after its TERM), TOTAL_S is when no
# further process starts (default 540; every skipped one is named), so the whole may last up to
# TOTAL_S + JOB_S: keep that under the device's command limit. Each model's preset is drawn (cached under
# $TPCP_CACHE, bounded by PRESET_S, default 300) before that model's runs.
# Rows go to $OUT/${CSV:-runs.csv}, each process's log to $OUT/logs/.
set -uo pipefail
source scripts/device_env.sh
require_gpus 2
mkdir -p "$OUT/logs"
N=$(python3 -c "import torch; print(torch.cuda.device_count())")
TPS=${TPS:-$(python3 -c "print(','.join(str(t) for t in (1, 2, 4, 8) if t <= $N))")}
MODELS=${MODELS:-qwen3-0.6b,qwen3-8b}; CONTROLS=${CONTROLS:-ideal,shm,queue,pipe,gloo,ring,zmq,hybrid}
for model in ${MODELS//,/ }; do
  [ $SECONDS -gt ${TOTAL_S:-540} ] && { echo "$model: not run (time)"; continue; }
  timeout --foreground -k 10 ${PRESET_S:-300} python3 -m harness.checkpoint $model >> "$OUT/logs/presets.log" 2>&1 \
    || { echo "$model: preset failed (see logs/presets.log), not run"; continue; }
  echo "$model preset: ready at $SECONDS s"
  for tp in ${TPS//,/ }; do
    planes=${CONTROLS//,/ }
    [ "$tp" = 1 ] && planes=$(echo $planes | tr ' ' '\n' | grep -vx ideal | head -1)
    [ -z "$planes" ] && echo "$model tp=$tp: not run (tp=1 has no workers, and ideal was the only plane asked)"
    for c in $planes; do
      [ $SECONDS -gt ${TOTAL_S:-540} ] && { echo "$model tp=$tp $c: not run (time)"; continue; }
      log="$OUT/logs/sweep_${model}_tp${tp}_$c.log"
      timeout --foreground -k 10 ${JOB_S:-300} python3 -m harness -m control=$c tp=$tp model=$model \
        workload=${WORKLOADS:-latency,latency-b8,bench} llm.async_scheduling=${ASYNC:-true} \
        ++workload.iterations=${ITER:-5} repeat=${REPEAT:-3} device=cuda progress=false results_dir="$OUT" \
        results_file=${CSV:-runs.csv} "$@" > "$log" 2>&1
      echo "$model tp=$tp $c: exit $? at $SECONDS s, $(grep -c '^\[ok\]' "$log") ok rows," \
        "$(grep -c '^\[failed\]' "$log") failed, all_reduce $(grep -o 'all_reduce=[a-z_]*' "$log" | sort -u | tr '\n' ' ')"
    done
  done
done
rm -f "$OUT"/*.lock
