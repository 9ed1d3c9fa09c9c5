#!/usr/bin/env bash
# Call 112 (session 43): the GEMVs' epilogue loads (the residual, the summed squares) issued right after the PDL
# wait, not after the sums: Qwen3-0.6B and 8B `latency` A/B, base .base (ea2a3b3) against this tree; the GPU
# tests of the GEMV modes; then call 111's decode-kernel variants (that call was turned away twice).
# Carry .whl .commit .base/.commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"; cat "$OUT/gpu.txt"
MODELS=qwen3-0.6b,qwen3-8b WORKLOADS=latency REPEAT=3 JOB_S=200 bash scripts/ab_one_gpu.sh 2>&1 | tail -12 | tee "$OUT/ab.txt"
echo "A/B done at $SECONDS s"
(timeout --foreground 100 python3 -m pytest -q tests/test_gpu_kernels.py \
  -k "norm or pdl_chain or one_tile or float32_greedy" 2>&1 | tail -6) > "$OUT/tests.txt"
cat "$OUT/tests.txt"; echo "tests done at $SECONDS s"
B="python3 scripts/bench_decode_kernel.py --batch 1 --pdl --default-only"
for shape in 0.6b 8b-tp1; do
  for flags in "--qk-norm" "" "--qk-norm --no-preload"; do
    [ $SECONDS -lt 570 ] && timeout --foreground 30 $B --shape $shape --contexts 64,96,160 --splits 1,auto $flags 2>&1 | grep -v Warn
  done
done | tee "$OUT/kernel.txt"
echo "all done at $SECONDS s"
