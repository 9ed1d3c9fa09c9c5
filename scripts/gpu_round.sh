#!/usr/bin/env bash
# One device call: GPU tests, kernel launch sweep, then the bench with this engine and with transformers.
set -uo pipefail
OUT=${OUT:-/tmp/out}
bash scripts/gpu_speed.sh "$@" > "$OUT/speed.log" 2>&1 || true
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
[ "${KERNEL_SWEEP:-1}" = 1 ] && python3 scripts/bench_decode_kernel.py > "$OUT/kernel.txt" 2>&1
grep "GB/s" "$OUT/kernel.txt" | sort -k2,2n -k11,11nr | awk '{c[$2]++} c[$2]<=4' 
cat "$OUT/speed.log" | grep -vE "^\s*$" | tail -40
