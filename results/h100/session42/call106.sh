#!/usr/bin/env bash
# Call 106 (session 42): Qwen3-0.6B and 8B `latency` A/B, base .base (895e689) against this tree (the residual and
# the norm's squares in the GEMV before each norm, at batch 1); then the GPU tests the change touches.
# Carry .whl .commit .base/.commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"; cat "$OUT/gpu.txt"
MODELS=qwen3-0.6b,qwen3-8b WORKLOADS=latency REPEAT=3 JOB_S=200 bash scripts/ab_one_gpu.sh 2>&1 | tail -12 | tee "$OUT/ab.txt"
echo "A/B done at $SECONDS s"
left=$((570 - SECONDS)); [ $left -gt 60 ] || left=60
(timeout --foreground $left python3 -m pytest -q tests/test_gpu.py tests/test_gpu_kernels.py \
  -k "fold or bf16 or 8b_width or float32_greedy or norm_gemv or long_rows or pdl_chain" 2>&1 | tail -15) > "$OUT/tests.txt"
cat "$OUT/tests.txt"; echo "all done at $SECONDS s"
