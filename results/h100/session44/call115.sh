#!/usr/bin/env bash
# Call 115 (prepared in session 43 on the branch qkv-rope-engine; run it after call 114 if the chain gains): the
# engine with qkv_rope (this tree) against main (.base: `git archive main`), Qwen3-0.6B and 8B `latency`, then the
# GPU tests the wiring touches. Carry .whl .commit .base/.commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"; cat "$OUT/gpu.txt"
MODELS=qwen3-0.6b,qwen3-8b WORKLOADS=latency REPEAT=3 JOB_S=200 bash scripts/ab_one_gpu.sh 2>&1 | tail -12 | tee "$OUT/ab.txt"
echo "A/B done at $SECONDS s"
left=$((585 - SECONDS)); [ $left -gt 30 ] || left=30
(timeout --foreground $left python3 -m pytest -q tests/test_gpu.py tests/test_gpu_kernels.py \
  -k "qkv_rope or float32_greedy or bf16 or fold or summed_norms" 2>&1 | tail -6) > "$OUT/tests.txt"
cat "$OUT/tests.txt"; echo "all done at $SECONDS s"
