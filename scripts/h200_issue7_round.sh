#!/usr/bin/env bash
# One device call after the StepBatch message change: GPU tests and the bench (no regression on issue 5),
# the step message's encoding costs on this host, then issue 7's table (every backend, tp=2,4,8, 3 repeats).
set -uo pipefail
OUT=${OUT:-/tmp/out}
TAG=${TAG:-v7_step_batch} SKIP_SYNC=1 HF=0 bash scripts/bench_one_gpu.sh
PYTHONPATH=/tmp/site:$PWD python3 scripts/step_encoding_cost.py 2>&1 | tee "$OUT/encoding.txt"
LIMIT=${LIMIT:-330} bash scripts/h200_ring_table.sh | head -12
rm -f "$OUT"/*.lock
