#!/usr/bin/env bash
# Call 136 (session 57): batch 1 takes the 128-token tile at every split count (this tree) against main with the
# wide tile at one split only (.mid: `git archive 2d2ddb8`) and main before the wide tile (.base: `git archive
# ab780bb`), on whichever card comes: the decode kernel's GPU tests; the kernel alone at batch 1 on .mid and this
# tree (the engine's launch and splits) and this tree's tile at other split counts; then Qwen3-0.6B and 8B `latency`
# on the three trees (3 repeats each), the 8B only if it fits in LIMIT (the call's limit_s); then 0.6B `latency-4k`
# on .mid and this tree if it fits. Carry .whl .commit .base .base/.commit .mid .mid/.commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv | tee "$OUT/gpu.txt"
timeout --foreground 150 python3 -m pytest -q tests/test_gpu.py tests/test_gpu_kernels.py \
  -k "paged_decode_kernel_matches_sdpa or split_decode_with_qk_norm or wide_tile or decode_order" 2>&1 | tail -4 \
  | tee "$OUT/tests_kernel.txt"
echo "kernel tests at $SECONDS s"
{ for tree in .mid .; do
    echo "== $tree $(cat $tree/.commit 2>/dev/null || cat .commit)"
    in_tree $tree timeout --foreground 60 python3 scripts/bench_decode_kernel.py --shape 0.6b,8b-tp1 --batch 1 \
      --contexts 128,160,256,512,1024,4096,32768 --pdl --qk-norm --default-only --splits auto 2>&1 | grep -v Warn
  done
  echo "== this tree's 128-token tile at other split counts"
  timeout --foreground 60 python3 scripts/bench_decode_kernel.py --shape 0.6b,8b-tp1 --batch 1 --contexts 4096,32768 \
    --pdl --qk-norm --launch 128,8,2 --splits 16,64 2>&1 | grep -v Warn; } | tee "$OUT/kernel.txt"
echo "kernel bench at $SECONDS s"
# One RUNS folder and one CSV for the three sweeps: $OUT returns at most 8 files.
export RUNS=$(mktemp -d /tmp/ab136.XXXXXX) CSV=call136_ab.csv REPEAT=3 JOB_S=200
TREES=".base:base .mid:mid .:new" MODELS=qwen3-0.6b WORKLOADS=latency bash scripts/ab_one_gpu.sh 2>&1 | tail -8 \
  | tee "$OUT/ab.txt"
[ $((${LIMIT:-590} - SECONDS)) -gt 300 ] && TREES=".base:base .mid:mid .:new" MODELS=qwen3-8b WORKLOADS=latency \
  bash scripts/ab_one_gpu.sh 2>&1 | tail -10 | tee -a "$OUT/ab.txt"
[ $((${LIMIT:-590} - SECONDS)) -gt 120 ] && TREES=".mid:mid .:new" MODELS=qwen3-0.6b WORKLOADS=latency-4k JOB_S=100 \
  bash scripts/ab_one_gpu.sh 2>&1 | tail -12 | tee -a "$OUT/ab.txt"
echo "all done at $SECONDS s"
