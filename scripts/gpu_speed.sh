#!/usr/bin/env bash
# On the H200 machine (device tool): GPU correctness tests, then nano-vllm's benchmark on the Qwen3-0.6B
# shape with this engine (and with transformers when ENGINES includes hf). Logs and CSV land in $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TPCP_CACHE=/tmp/tpcp-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  python3 -m pytest -q -x tests/test_gpu.py 2>&1 | tail -15 | tee "$OUT/pytest_gpu.txt"
fi
for engine in ${ENGINES:-tp}; do
  python3 -m harness workload=bench model=qwen3-0.6b tp=1 device=cuda engine=$engine results_dir="$OUT" \
    progress=false "$@" 2>&1 | grep -v "it/s]" | tee -a "$OUT/bench.log" | tail -12
done
