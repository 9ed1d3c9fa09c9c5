#!/usr/bin/env bash
# Call 120 (branch ss-slots, the consumers' slot sum moved to where it is used): (1) the engine with the 32-slot sums
# (this tree) against main (.base), Qwen3-8B then 0.6B `latency`, 3 repeats; (2) the GPU tests the change touches, in
# the time left. Carry .whl .commit .base/.commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"; cat "$OUT/gpu.txt"
MODELS=qwen3-8b,qwen3-0.6b WORKLOADS=latency REPEAT=3 JOB_S=150 bash scripts/ab_one_gpu.sh 2>&1 | tail -10 \
  | tee "$OUT/ab.txt"
echo "A/B done at $SECONDS s"
left=$((585 - SECONDS)); [ $left -gt 30 ] || left=30
(timeout --foreground $left python3 -m pytest -q tests/test_gpu_kernels.py tests/test_gpu.py \
  -k "fold or summed_norms or norm or float32_greedy" 2>&1 | tail -4) > "$OUT/tests.txt"
cat "$OUT/tests.txt"; echo "all done at $SECONDS s"
