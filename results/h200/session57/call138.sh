#!/usr/bin/env bash
# Call 138 (session 57): the wide tile at batch 1, one split, group <= 2 (this tree) against main before the wide
# tile (.base: `git archive ab780bb`), on whichever card comes: the wide-tile GPU tests, then Qwen3-0.6B `latency` on
# both trees and the 8B's on this tree if it fits in LIMIT (the call's limit_s; 3 repeats each). Carry .whl .commit
# .base .base/.commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv | tee "$OUT/gpu.txt"
timeout --foreground 60 python3 -m pytest -q tests/test_gpu_kernels.py -k wide_tile 2>&1 | tail -4 \
  | tee "$OUT/tests_kernel.txt"
echo "kernel tests at $SECONDS s"
export RUNS=$(mktemp -d /tmp/ab138.XXXXXX) CSV=call138_ab.csv REPEAT=3 JOB_S=200
MODELS=qwen3-0.6b WORKLOADS=latency bash scripts/ab_one_gpu.sh 2>&1 | tail -8 | tee "$OUT/ab.txt"
[ $((${LIMIT:-590} - SECONDS)) -gt 130 ] && TREES=".:new" MODELS=qwen3-8b WORKLOADS=latency bash scripts/ab_one_gpu.sh \
  2>&1 | tail -10 | tee -a "$OUT/ab.txt"
# The whole GPU suite has not run since the wide tile (session 56): float32 greedy at batch 1 takes it too.
left=$((${LIMIT:-590} - SECONDS)); [ $left -gt 60 ] && (timeout --foreground $left python3 -m pytest -q tests/test_gpu.py \
  tests/test_gpu_kernels.py 2>&1 | tail -6) | tee "$OUT/tests_gpu.txt"
echo "all done at $SECONDS s"
