#!/usr/bin/env bash
# Call 135 (session 56): at batch 1 one split takes up to 128 cached tokens in one 128-token tile at 8 warps, so
# contexts of 66-129 tokens run without the split merge kernel (this tree) against main before it (.base: `git
# archive ab780bb`), on whichever card comes: the decode kernel's GPU tests first, then the kernel alone at batch 1
# on both trees (the engine's launch and splits), then Qwen3-0.6B and 8B `latency` (3 repeats each tree), then this tree's
# 4-warp and 2-split variants of the kernel for the record. Carry .whl .commit .base .base/.commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv | tee "$OUT/gpu.txt"
timeout --foreground 150 python3 -m pytest -q tests/test_gpu.py tests/test_gpu_kernels.py \
  -k "paged_decode_kernel_matches_sdpa or split_decode_with_qk_norm or wide_tile or decode_order" 2>&1 | tail -4 \
  | tee "$OUT/tests_kernel.txt"
echo "kernel tests at $SECONDS s"
for tree in .base .; do
  echo "== $tree $(cat $tree/.commit 2>/dev/null || cat .commit)"
  in_tree $tree timeout --foreground 60 python3 scripts/bench_decode_kernel.py --shape 0.6b,8b-tp1 --batch 1 \
    --contexts 64,96,128,160,4096 --pdl --qk-norm --default-only --splits auto 2>&1 | grep -v Warn
done | tee "$OUT/kernel.txt"
echo "kernel bench at $SECONDS s"
# LIMIT: the call's seconds (run's limit_s); the 8B's A/B (~250 s) and the variants run only if they fit.
MODELS=qwen3-0.6b WORKLOADS=latency REPEAT=3 JOB_S=200 CSV=call135_ab.csv bash scripts/ab_one_gpu.sh 2>&1 \
  | tail -8 | tee "$OUT/ab.txt"
[ $((${LIMIT:-590} - SECONDS)) -gt 270 ] && MODELS=qwen3-8b WORKLOADS=latency REPEAT=3 JOB_S=200 \
  CSV=call135_ab8b.csv bash scripts/ab_one_gpu.sh 2>&1 | tail -8 | tee "$OUT/ab8b.txt"
[ $((${LIMIT:-590} - SECONDS)) -gt 90 ] || exit 0
{ timeout --foreground 40 python3 scripts/bench_decode_kernel.py --shape 0.6b,8b-tp1 --batch 1 --contexts 96,128 \
    --pdl --qk-norm --launch 128,4,2 --splits 1
  timeout --foreground 40 python3 scripts/bench_decode_kernel.py --shape 0.6b,8b-tp1 --batch 1 --contexts 160,256 \
    --pdl --qk-norm --launch 128,8,2 --splits 2; } 2>&1 | grep -v Warn | tee "$OUT/kernel_variants.txt"
echo "all done at $SECONDS s"
