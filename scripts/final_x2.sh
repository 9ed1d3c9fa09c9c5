#!/usr/bin/env bash
# The last device call of the session (nvidia-h200-x2): the control-plane table in one process per plane
# (latency batch 1, async on and off, 3 repeats), the planes alone at the same size, a tp=2 GPU test of a
# second engine in one process (symmetric memory re-created), and tp=2 on two simulated nodes (one GPU each).
set -uo pipefail
source scripts/device_env.sh
mkdir -p "$OUT/logs"
for c in ideal shm ring pipe gloo zmq queue hybrid; do
  [ $SECONDS -gt ${TABLE_S:-150} ] && { echo "table: $c not run (time)"; continue; }
  timeout 70 python3 -m harness -m control=$c tp=2 model=qwen3-0.6b workload=latency "llm.async_scheduling=true,false" \
    ++workload.iterations=5 repeat=3 device=cuda progress=false results_dir="$OUT" results_file=control.csv \
    > "$OUT/logs/control_$c.log" 2>&1
  echo "$c: exit $? at $SECONDS s, $(grep -c '^\[ok\]' "$OUT/logs/control_$c.log") ok rows"
done
timeout 30 python3 -m harness -m workload=broadcast control=shm,queue,pipe,gloo,ring,zmq,hybrid tp=2 \
  "workload.decode_batches=[1]" "workload.prefill_batches=[]" "workload.raw_bytes=[]" workload.messages=500 repeat=3 \
  progress=false results_dir="$OUT" results_file=broadcast.csv > "$OUT/logs/broadcast.log" 2>&1
echo "broadcast: exit $? at $SECONDS s"
LOGDIR="$OUT/logs" NODES=2 NPROC=1 PORT=29650 timeout 60 bash scripts/sim_nodes.sh -m harness control=hybrid tp=2 \
  model=qwen3-0.6b workload=latency ++workload.iterations=5 repeat=2 device=cuda progress=false results_dir="$OUT" \
  results_file=sim_nodes.csv > /dev/null 2>&1; echo "sim nodes: exit $? at $SECONDS s"
timeout 45 python3 -m pytest -q -x --tb=short tests/test_gpu.py -k "every_control_plane and (shm or zmq)" \
  > "$OUT/logs/pytest_gpu.txt" 2>&1; echo "pytest: $(tail -1 "$OUT/logs/pytest_gpu.txt") at $SECONDS s"
rm -f "$OUT"/*.lock; tar czf "$OUT/logs.tgz" -C "$OUT" logs; rm -rf "$OUT/logs"
python3 -m harness.analyze "$OUT/control.csv" 2>&1 | grep -A30 "exposed cost" | cut -c1-180
