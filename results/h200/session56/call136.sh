#!/usr/bin/env bash
# Call 136 (prepared in session 56, not yet run): call 135's A/B for Qwen3-8B, which its time did not cover, and the
# 0.6B's again. Base `ab780bb` (.base: `git archive ab780bb`), new = main with the wide tile (`5f68592`). On whichever
# card comes. Carry .whl .commit .base .base/.commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv | tee "$OUT/gpu.txt"
MODELS=qwen3-8b,qwen3-0.6b WORKLOADS=latency REPEAT=3 JOB_S=200 CSV=call136_ab.csv bash scripts/ab_one_gpu.sh 2>&1 \
  | tail -10 | tee "$OUT/ab.txt"
echo "all done at $SECONDS s"
