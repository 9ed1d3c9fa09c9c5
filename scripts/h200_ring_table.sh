#!/usr/bin/env bash
# On the H200 host (device tool): the decode-256 step message and a 256-byte payload through every backend
# at tp=2,4,8, 3 repeats each (issue 7's table). Bounded by LIMIT seconds; CSV and table land in $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout ${LIMIT:-100} python3 -m harness -m workload=broadcast control=ring,shm,pipe,queue,gloo tp=2,4,8 repeat=3 \
  progress=false results_dir="$OUT" workload.messages=500 workload.warmup=50 'workload.decode_batches=[256]' \
  'workload.prefill_batches=[]' 'workload.raw_bytes=[256]' > "$OUT/ring.log" 2>&1
python3 scripts/broadcast_table.py "$OUT/runs.csv" 2>&1 | head -40
