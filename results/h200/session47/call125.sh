#!/usr/bin/env bash
# Call 125 (branch ss-rule = main + results/h200/session47/ss-rule.patch: 32 slots 128 B apart for the 8B's rows,
# 1 slot for the 0.6B's, which now compile to main's kernels): (1) the engine A/B, this tree against main (.base),
# Qwen3-0.6B then 8B `latency`, 3 repeats; (2) the GPU tests of the changed kernels until DEADLINE (s, default 420).
# Carry .whl .commit .base/.commit. Predictions: results/h200/NOTES.md, "Call 125 (prepared...)".
source scripts/device_env.sh; require_gpus 1
DEADLINE=${DEADLINE:-420}
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"; cat "$OUT/gpu.txt"
MODELS=qwen3-0.6b,qwen3-8b WORKLOADS=latency REPEAT=3 JOB_S=150 bash scripts/ab_one_gpu.sh 2>&1 | tail -10 \
  | tee "$OUT/ab.txt"
echo "A/B done at $SECONDS s"
left=$((DEADLINE - SECONDS))
if [ $left -gt 30 ]; then
  (timeout --foreground $left python3 -m pytest -q tests/test_gpu_kernels.py tests/test_gpu.py \
    -k "fold or summed_norms or norm" 2>&1 | tail -4) > "$OUT/tests.txt"
  cat "$OUT/tests.txt"
fi
echo "all done at $SECONDS s"
