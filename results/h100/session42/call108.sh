#!/usr/bin/env bash
# Call 108 (session 42): Qwen3-0.6B `latency-4k` and `latency-b8` A/B, base .base (895e689) against f51947d.
# Carry .whl .commit .base/.commit.
source scripts/device_env.sh; require_gpus 1
MODELS=qwen3-0.6b WORKLOADS=latency-4k,latency-b8 REPEAT=2 JOB_S=220 bash scripts/ab_one_gpu.sh 2>&1 | tail -12 | tee "$OUT/ab.txt"
echo "all done at $SECONDS s"
