#!/usr/bin/env bash
# One device call for issue 5 (H200): GPU tests, nano-vllm's bench with this engine, transformers' row in
# the same CSV once the engine row reaches HF_AT tok/s (else a profile of 20 decode steps), then the
# bench with async_scheduling=false. Everything lands in $OUT.
#   TAG=v5 HF_AT=20000 bash scripts/h200_bench_round.sh [extra harness overrides]
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TPCP_CACHE=/tmp/tpcp-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; TAG=${TAG:-v5}; CSV=bench_$TAG.csv
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
bench() {
  python3 -m harness workload=bench model=qwen3-0.6b tp=1 device=cuda progress=false results_dir="$OUT" "$@" 2>&1 \
    | grep -v "it/s]" | tee -a "$OUT/bench.log" | tail -8
}
[ "${SKIP_TESTS:-0}" = 1 ] || timeout 300 python3 -m pytest -q -x tests/test_gpu.py 2>&1 | tail -15 | tee "$OUT/pytest_gpu.txt"
bench results_file=$CSV "$@"
tok=$(python3 -c "import csv; print(int(float(list(csv.DictReader(open('$OUT/$CSV')))[-1]['output_tok_s'])))" 2>/dev/null || echo 0)
echo "engine row: $tok output tok/s"
if [ "$tok" -ge "${HF_AT:-20000}" ]; then
  bench results_file=$CSV engine=hf
elif [ "${SKIP_PROFILE:-0}" != 1 ]; then  # short of the target: where does the time go?
  timeout 200 python3 scripts/profile_steps.py > "$OUT/profile.txt" 2>&1; head -40 "$OUT/profile.txt"
fi
[ "${SKIP_SYNC:-0}" = 1 ] || bench results_file=bench_${TAG}_sync.csv llm.async_scheduling=false "$@"
rm -f "$OUT"/*.lock
