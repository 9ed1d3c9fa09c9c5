#!/usr/bin/env bash
# On the H200 machine's host (device tool): workload=broadcast for every backend at tp=2,4,8.
# Usage: bash scripts/h200_broadcast.sh [extra hydra overrides]; CSV and log land in $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nproc; python3 -c "import torch; print('torch', torch.__version__)"
python3 -m harness -m workload=broadcast control=${CONTROLS:-shm,queue,pipe,gloo} tp=2,4,8 progress=false \
  results_dir="$OUT" workload.messages=1000 workload.max_bytes_per_payload=268435456 "$@" 2>&1 \
  | grep -v "^\[" > "$OUT/broadcast.log"
grep -iE "error|Traceback" "$OUT/broadcast.log" | head -5
python3 scripts/broadcast_table.py "$OUT/runs.csv" | tee "$OUT/table.md"
