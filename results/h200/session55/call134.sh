#!/usr/bin/env bash
# Call 134 (session 55): the decode kernel with its loads before the PDL wait and the new k in a padding row of the
# query tile (this tree) against main before it (.base: `git archive 2c246bf`), on whichever card comes: the kernel's
# tests first, then Qwen3-0.6B and 8B `latency` (3 repeats each tree), then the kernel alone at batch 1, then the
# GPU tests of the engine's greedy paths with the time left. Carry .whl .commit .base .base/.commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv | tee "$OUT/gpu.txt"
timeout --foreground 120 python3 -m pytest -q tests/test_gpu.py tests/test_gpu_kernels.py \
  -k "paged_decode_kernel_matches_sdpa or split_decode_with_qk_norm or decode_order" 2>&1 | tail -4 | tee "$OUT/tests_kernel.txt"
echo "kernel tests at $SECONDS s"
MODELS=qwen3-0.6b,qwen3-8b WORKLOADS=latency REPEAT=3 JOB_S=200 CSV=call134_ab.csv bash scripts/ab_one_gpu.sh 2>&1 \
  | tail -12 | tee "$OUT/ab.txt"
echo "A/B done at $SECONDS s"
for tree in .base .; do
  echo "== $tree $(cat $tree/.commit 2>/dev/null || cat .commit)"
  in_tree $tree timeout --foreground 60 python3 scripts/bench_decode_kernel.py --shape 0.6b,8b-tp1 --batch 1 \
    --contexts 64,96,160,4096 --pdl --qk-norm --default-only --splits auto 2>&1 | grep -v Warn
done | tee "$OUT/kernel.txt"
echo "kernel bench at $SECONDS s"
left=$((585 - SECONDS)); [ $left -gt 20 ] || left=20
timeout --foreground $left python3 -m pytest -q tests/test_gpu.py tests/test_gpu_kernels.py \
  -k "greedy or pdl_chain or bf16" 2>&1 | tail -6 | tee "$OUT/tests_greedy.txt"
echo "all done at $SECONDS s"
