#!/usr/bin/env bash
# Call 105 (session 42): scripts/norm_chain.py at both models' shapes; Qwen3-0.6B `latency` A/B, base .base
# (895e689) against this tree (norms folded into the projections); the GPU tests the change touches.
# Carry .whl .commit .base/.commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"; cat "$OUT/gpu.txt"
for s in 0.6b 8b; do timeout --foreground 200 python3 scripts/norm_chain.py --shape $s 2>&1 | tail -8 | tee -a "$OUT/chain.txt"; done
echo "chain done at $SECONDS s"
MODELS=qwen3-0.6b WORKLOADS=latency REPEAT=3 JOB_S=200 bash scripts/ab_one_gpu.sh 2>&1 | tail -12 | tee "$OUT/ab.txt"
echo "A/B done at $SECONDS s"
(timeout --foreground 240 python3 -m pytest -q tests/test_gpu.py tests/test_gpu_kernels.py \
  -k "fold or bf16 or 8b_width or float32_greedy or norm_gemv or long_rows or pdl_chain" 2>&1 | tail -15) > "$OUT/tests.txt"; cat "$OUT/tests.txt"
echo "all done at $SECONDS s"
