#!/usr/bin/env bash
# Call 111 (session 43): where the batch-1 decode attention stage's ~6.4 us go (call 110's critical path: 6.35 us
# exposed a layer for the 0.6B, 6.54 for the 8B, beside 1.1-1.4 us for the merge kernel). The kernel alone in a
# PDL chain at batch 1 (bench_decode_kernel.py), with and without the q/k norm and the early tile load, at 64 / 96
# / 160 tokens (1 / 2 / 4 splits) and unsplit; one tile of 128 or 256 tokens with 4 or 8 warps for the whole context; then Nsight Compute on the engine's variant (0.6B heads, 96 tokens):
# duration, warp stall reasons, the hottest source lines. Carry .whl .commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"; cat "$OUT/gpu.txt"
B="python3 scripts/bench_decode_kernel.py --batch 1 --pdl --default-only"
for shape in 0.6b 8b-tp1; do
  for flags in "--qk-norm" "" "--qk-norm --no-preload"; do
    timeout --foreground 120 $B --shape $shape --contexts 64,96,160 --splits 1,auto $flags 2>&1 | grep -v Warn
  done
done | tee "$OUT/kernel.txt"
# one tile for a whole short context (no split, no merge kernel), more warps: the early load holds it all
L="python3 scripts/bench_decode_kernel.py --batch 1 --pdl --qk-norm --splits 1"
for shape in 0.6b 8b-tp1; do
  for launch in 128,4,2 128,8,2 256,8,2 256,8,1; do
    timeout --foreground 120 $L --shape $shape --contexts 96,160 --launch $launch 2>&1 | grep -v Warn
  done
done | tee "$OUT/one_tile.txt"
echo "variants done at $SECONDS s"
NCU="ncu --clock-control none -k regex:_paged_decode_kernel|_merge_splits_kernel -c 4"
timeout --foreground 240 $NCU -o "$OUT/decode" --section SpeedOfLight --section LaunchStats --section Occupancy \
  --section WarpStateStats --section SourceCounters --import-source yes \
  $B --shape 0.6b --contexts 96 --splits auto --qk-norm > "$OUT/ncu_run.txt" 2>&1
tail -5 "$OUT/ncu_run.txt"
ncu -i "$OUT/decode.ncu-rep" --page details --print-details all > "$OUT/ncu_details.txt" 2>&1
ncu -i "$OUT/decode.ncu-rep" --page source --csv --print-source sass -k regex:_paged_decode_kernel -c 1 \
  > "$OUT/ncu_source_sass.csv" 2>&1
ncu -i "$OUT/decode.ncu-rep" --page source --csv --print-source cuda -k regex:_paged_decode_kernel -c 1 \
  > "$OUT/ncu_source_py.csv" 2>&1
grep -E "Duration|Registers|Stall|Warp Cycles|Theoretical Occ|Achieved Occ|Local" "$OUT/ncu_details.txt" | head -60
wc -c "$OUT"/*; echo "all done at $SECONDS s"
