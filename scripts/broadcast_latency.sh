#!/usr/bin/env bash
# Control-plane broadcast latency on one host, no model (workload=broadcast, harness/broadcast.py): for each
# control x tp x payload, one-way latency p50/p99 (rank 0's clock before serialising to a worker's after
# deserialising, pooled over workers) and rank 0's send cost; then the markdown tables
# (scripts/broadcast_table.py) and what a decode step's message costs to encode on this host
# (scripts/step_encoding_cost.py). Two payload sets:
#   PAYLOADS=all (default): every payload of conf/workload/broadcast.yaml (decode-N step messages,
#     prefill-NxT, raw-NB), at most 256 MiB each; defaults CONTROLS=shm,queue,pipe,gloo REPEAT=1
#     MESSAGES=1000: the table of results/h200/BROADCAST.md
#   PAYLOADS=step: the decode-256 step message and a 256-byte raw payload only; defaults
#     CONTROLS=ring,shm,pipe,queue,gloo REPEAT=3 MESSAGES=500: the table of results/h200/RING.md
# Run from the repository root (device tool; the CPU cores of a GPU host); extra arguments are harness overrides:
#   bash scripts/broadcast_latency.sh
#   PAYLOADS=step bash scripts/broadcast_latency.sh
#   PAYLOADS=step CONTROLS=ring,shm,zmq,hybrid TPS=2,4 LIMIT=200 bash scripts/broadcast_latency.sh
# Other knobs: TPS (2,4,8), LIMIT (seconds for the sweep; 590 for all, 330 for step), CSV (broadcast.csv).
# Bad input: one line on stderr and exit 2, with no row written.
# Rows: $OUT/$CSV; log: $OUT/broadcast.log; tables: $OUT/table.md; encoding costs: $OUT/step_encoding_cost.txt.
set -uo pipefail
source scripts/device_env.sh
case ${PAYLOADS:-all} in
  all) payload_args=(); controls=shm,queue,pipe,gloo; repeat=1; messages=1000; limit=590 ;;
  step) payload_args=('workload.decode_batches=[256]' 'workload.prefill_batches=[]' 'workload.raw_bytes=[256]')
        controls=ring,shm,pipe,queue,gloo; repeat=3; messages=500; limit=330 ;;
  *) echo "error: PAYLOADS must be all or step, got ${PAYLOADS}" >&2; exit 2 ;;
esac
CSV=${CSV:-broadcast.csv} TPS=${TPS:-2,4,8} CONTROLS=${CONTROLS:-$controls} LIMIT=${LIMIT:-$limit}
[[ $LIMIT =~ ^[1-9][0-9]*$ ]] || { echo "error: LIMIT must be a whole number of seconds, got ${LIMIT}" >&2; exit 2; }
# One job of the first values, in a line; the sweep checks all of its jobs before the first (a refusal: below).
check_overrides workload=broadcast control=${CONTROLS%%,*} tp=${TPS%%,*} ${payload_args[@]+"${payload_args[@]}"} "$@"
timeout --foreground $LIMIT python3 -m harness -m workload=broadcast control=$CONTROLS tp=$TPS \
  repeat=${REPEAT:-$repeat} workload.messages=${MESSAGES:-$messages} workload.warmup=50 \
  workload.max_bytes_per_payload=268435456 progress=false results_dir="$OUT" results_file="$CSV" \
  ${payload_args[@]+"${payload_args[@]}"} "$@" > "$OUT/broadcast.log" 2>&1
rc=$?
if [ $rc -eq 2 ]; then  # bad input in a later value of the sweep: refused before its first job, nothing ran
  { grep -m1 "^error: " "$OUT/broadcast.log" || echo "error: the harness refused the sweep"; } >&2
  rm -f "$OUT/broadcast.log"
  exit 2
fi
echo "broadcast: exit $rc after $SECONDS s"
{ nproc; python3 -c "import torch; print('torch', torch.__version__)"; } 2>&1 | tee "$OUT/host.txt"
grep -iE "error|Traceback" "$OUT/broadcast.log" | head -5
rm -f "$OUT"/*.lock
[ -s "$OUT/$CSV" ] || { echo "error: no rows in $OUT/$CSV (see $OUT/broadcast.log)" >&2; exit $(( rc ? rc : 1 )); }
python3 scripts/broadcast_table.py "$OUT/$CSV" > "$OUT/table.md" 2>&1; head -40 "$OUT/table.md"
python3 scripts/step_encoding_cost.py 2>&1 | tee "$OUT/step_encoding_cost.txt"
exit $rc
