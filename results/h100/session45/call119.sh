#!/usr/bin/env bash
# Call 119 (branch ss-slots; call 118 was never started: no machine): (1) gemv_epilogue.py, the add epilogue with 1
# and 32 slots against plain, o_proj and down of both models and the 8B's QKV; (2) the engine with the 32-slot sums
# (this tree) against main (.base), Qwen3-8B then 0.6B `latency`, 3 repeats; (3) the GPU tests the change touches,
# in the time left. Carry .whl .commit .base/.commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"; cat "$OUT/gpu.txt"
timeout --foreground 120 python3 results/h100/session45/gemv_epilogue.py 2>&1 | grep -v Warn | tee "$OUT/epilogue.txt"
echo "epilogue done at $SECONDS s"
MODELS=qwen3-8b,qwen3-0.6b WORKLOADS=latency REPEAT=3 JOB_S=150 bash scripts/ab_one_gpu.sh 2>&1 | tail -10 \
  | tee "$OUT/ab.txt"
echo "A/B done at $SECONDS s"
left=$((585 - SECONDS)); [ $left -gt 30 ] || left=30
(timeout --foreground $left python3 -m pytest -q tests/test_gpu_kernels.py tests/test_gpu.py \
  -k "fold or summed_norms or norm or float32_greedy" 2>&1 | tail -4) > "$OUT/tests.txt"
cat "$OUT/tests.txt"; echo "all done at $SECONDS s"
