#!/usr/bin/env bash
# Call 123 (branch ss-rule = main + results/h200/session46/ss-rule.patch): 32 slots 128 B apart where the row is
# longer than NORM_GEMV_MAX_K (the 8B), 1 slot otherwise (the 0.6B). (1) The engine A/B, this tree against main
# (.base), Qwen3-0.6B then 8B `latency`, 3 repeats; (2) the 8B's GEMVs with 1-row tiles (bench_gemv.py --tiles,
# <= 100 s); (3) the GPU tests the change touches, until DEADLINE (s, default 585).
# Carry .whl .commit .base/.commit. Predictions: results/h200/NOTES.md, "Call 123 (prepared...)".
source scripts/device_env.sh; require_gpus 1
DEADLINE=${DEADLINE:-585}
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"; cat "$OUT/gpu.txt"
MODELS=qwen3-0.6b,qwen3-8b WORKLOADS=latency REPEAT=3 JOB_S=150 bash scripts/ab_one_gpu.sh 2>&1 | tail -10 \
  | tee "$OUT/ab.txt"
echo "A/B done at $SECONDS s"
# (2) the 8B's GEMVs with 1-row tiles beside the default (session 47: o_proj's 3.10 waves of 2-row programs)
timeout --foreground 100 python3 scripts/bench_gemv.py --models qwen3-8b --tp 1 --tiles 1,4096,2 1,4096,4 1,4096,8 \
  --out "$OUT/gemv_tiles.txt" > "$OUT/gemv_tiles.log" 2>&1; tail -6 "$OUT/gemv_tiles.log"
echo "tiles done at $SECONDS s"
left=$((DEADLINE - SECONDS))
if [ $left -gt 30 ]; then
  (timeout --foreground $left python3 -m pytest -q tests/test_gpu_kernels.py tests/test_gpu.py \
    -k "fold or summed_norms or norm or float32_greedy" 2>&1 | tail -4) > "$OUT/tests.txt"
  cat "$OUT/tests.txt"
fi
echo "all done at $SECONDS s"
