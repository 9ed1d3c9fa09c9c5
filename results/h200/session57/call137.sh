#!/usr/bin/env bash
# Call 137 (session 57): the wide tile at batch 1 up to 8 splits (this tree) against main with it at one split only
# (.mid: `git archive 2d2ddb8`) and main before it (.base: `git archive ab780bb`), on whichever card comes: the
# wide-tile GPU tests; the kernel alone at 1024-4096 tokens (the engine's launch) and 16 splits of 128 at 1536 and
# 2048; Qwen3-8B `latency` on the three trees (3 repeats each); then 0.6B `latency-4k` on .mid and this tree if it
# fits in LIMIT (the call's limit_s). Carry .whl .commit .base .base/.commit .mid .mid/.commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv | tee "$OUT/gpu.txt"
timeout --foreground 120 python3 -m pytest -q tests/test_gpu_kernels.py -k wide_tile 2>&1 | tail -4 \
  | tee "$OUT/tests_kernel.txt"
echo "kernel tests at $SECONDS s"
{ timeout --foreground 60 python3 scripts/bench_decode_kernel.py --shape 0.6b,8b-tp1 --batch 1 \
    --contexts 1024,1536,2048,4096 --pdl --qk-norm --default-only --splits auto 2>&1 | grep -v Warn
  timeout --foreground 60 python3 scripts/bench_decode_kernel.py --shape 0.6b,8b-tp1 --batch 1 --contexts 1536,2048 \
    --pdl --qk-norm --launch 128,8,2 --splits 16 2>&1 | grep -v Warn; } | tee "$OUT/kernel.txt"
echo "kernel bench at $SECONDS s"
export RUNS=$(mktemp -d /tmp/ab137.XXXXXX) CSV=call137_ab.csv REPEAT=3 JOB_S=200  # one CSV: $OUT returns 8 files
TREES=".base:base .mid:mid .:new" MODELS=qwen3-8b WORKLOADS=latency bash scripts/ab_one_gpu.sh 2>&1 | tail -8 \
  | tee "$OUT/ab.txt"
[ $((${LIMIT:-590} - SECONDS)) -gt 110 ] && TREES=".mid:mid .:new" MODELS=qwen3-0.6b WORKLOADS=latency-4k JOB_S=100 \
  bash scripts/ab_one_gpu.sh 2>&1 | tail -10 | tee -a "$OUT/ab.txt"
echo "all done at $SECONDS s"
