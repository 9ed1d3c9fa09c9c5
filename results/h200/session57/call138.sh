#!/usr/bin/env bash
# Call 138 (session 57): the wide tile at batch 1, one split, group <= 2 (this tree) against main before the wide
# tile (.base: `git archive ab780bb`), on whichever card comes: the decode kernel's GPU tests, then Qwen3-0.6B and
# 8B `latency` (3 repeats each tree). Carry .whl .commit .base .base/.commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv | tee "$OUT/gpu.txt"
timeout --foreground 120 python3 -m pytest -q tests/test_gpu.py tests/test_gpu_kernels.py \
  -k "paged_decode_kernel_matches_sdpa or split_decode_with_qk_norm or wide_tile or decode_order" 2>&1 | tail -4 \
  | tee "$OUT/tests_kernel.txt"
echo "kernel tests at $SECONDS s"
export RUNS=$(mktemp -d /tmp/ab138.XXXXXX) CSV=call138_ab.csv REPEAT=3 JOB_S=200
MODELS=qwen3-0.6b,qwen3-8b WORKLOADS=latency bash scripts/ab_one_gpu.sh 2>&1 | tail -10 | tee "$OUT/ab.txt"
echo "all done at $SECONDS s"
