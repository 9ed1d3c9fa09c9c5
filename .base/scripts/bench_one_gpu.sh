#!/usr/bin/env bash
# nano-vllm's benchmark on one GPU (device tool, nvidia-h200): workload=bench, the Qwen3-0.6B shape, tp=1,
# this engine's output tok/s, TTFT/TPOT, decode step time and GPU utilisation, one CSV row per run tagged
# TAG (the rows of results/h200/bench.csv; results/h200/NOTES.md reads them). In order, each step optional:
#   1. GPU name, clocks, driver and torch/triton/transformers versions -> $OUT/gpu.txt, $OUT/versions.txt
#   2. the GPU tests: pytest $TESTS (default tests/test_gpu.py; SKIP_TESTS=1 skips) -> $OUT/pytest_gpu.txt
#   3. the bench with this engine -> $OUT/$CSV (default bench.csv), tag=$TAG
#   4. transformers' generate on the same checkpoint (engine=hf) in the same CSV and tag: HF=1 always, HF=0
#      never, HF=auto (default) only once the engine row reaches HF_AT output tok/s (default 20000)
#   5. HF=auto and the engine row short of HF_AT: a profile of 20 decode steps (scripts/profile_steps.py)
#      -> $OUT/profile.txt (SKIP_PROFILE=1 skips)
#   6. the bench again with llm.async_scheduling=false, tag=${TAG}_sync (SKIP_SYNC=1 skips)
#   7. KERNEL_SWEEP=1: the paged-decode kernel's launch sweep (scripts/bench_decode_kernel.py)
#      -> $OUT/decode_kernel_sweep.txt, the 4 fastest launches per context printed
# Run from the repository root; extra arguments are harness overrides for every bench run:
#   TAG=v7_step_batch bash scripts/bench_one_gpu.sh
#   TAG=v6_fused HF=1 KERNEL_SWEEP=1 bash scripts/bench_one_gpu.sh llm.compile=false
#   TAG=my_change SKIP_SYNC=1 HF=0 TESTS="tests/test_gpu.py tests/test_correctness.py -k cuda" bash scripts/bench_one_gpu.sh
set -uo pipefail
source scripts/device_env.sh
require_gpus 1
TAG=${TAG:-dev}; CSV=${CSV:-bench.csv}; HF=${HF:-auto}
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem,power.draw --format=csv; } \
  2>&1 | tee "$OUT/gpu.txt"
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__,
'transformers', transformers.__version__)" 2>&1 | tee "$OUT/versions.txt"
bench() {
  python3 -m harness workload=bench model=qwen3-0.6b tp=1 device=cuda progress=false results_dir="$OUT" \
    results_file="$CSV" "$@" 2>&1 | grep -v "it/s]" | tee -a "$OUT/bench.log" | tail -8
}
[ "${SKIP_TESTS:-0}" = 1 ] || timeout --foreground 300 python3 -m pytest -q -x ${TESTS:-tests/test_gpu.py} 2>&1 | tail -15 \
  | tee "$OUT/pytest_gpu.txt"
bench tag="$TAG" "$@"
# 0 when the bench wrote no ok row of this tag (a failed run); a broken script shows its traceback
tok=$(python3 -c "import csv, sys; rows = [r for r in csv.DictReader(open(sys.argv[1])) if r['tag'] == sys.argv[2]
and r['status'] == 'ok']; print(int(float(rows[-1]['output_tok_s'])) if rows else 0)" "$OUT/$CSV" "$TAG" || echo 0)
echo "engine row: $tok output tok/s"
if [ "$HF" = 1 ] || { [ "$HF" = auto ] && [ "$tok" -ge "${HF_AT:-20000}" ]; }; then
  bench tag="$TAG" engine=hf "$@"
elif [ "$HF" = auto ] && [ "${SKIP_PROFILE:-0}" != 1 ]; then  # short of the target: where does the time go?
  timeout --foreground 200 python3 scripts/profile_steps.py > "$OUT/profile.txt" 2>&1; head -40 "$OUT/profile.txt"
fi
[ "${SKIP_SYNC:-0}" = 1 ] || bench tag="${TAG}_sync" llm.async_scheduling=false "$@"
if [ "${KERNEL_SWEEP:-0}" = 1 ]; then
  timeout --foreground 300 python3 scripts/bench_decode_kernel.py > "$OUT/decode_kernel_sweep.txt" 2>&1
  grep " TB/s (" "$OUT/decode_kernel_sweep.txt" | sort -k2,2n -k11,11nr | awk '{c[$2]++} c[$2]<=4'
fi
rm -f "$OUT"/*.lock
