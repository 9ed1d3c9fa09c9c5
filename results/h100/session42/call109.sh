#!/usr/bin/env bash
# Call 109 (session 42): Qwen3-0.6B `bench` A/B, base .base (895e689) against this tree. Carry .whl .commit .base/.commit.
source scripts/device_env.sh; require_gpus 1
MODELS=qwen3-0.6b WORKLOADS=bench REPEAT=2 JOB_S=180 bash scripts/ab_one_gpu.sh 2>&1 | tail -12 | tee "$OUT/ab.txt"
echo "all done at $SECONDS s"
