#!/usr/bin/env bash
# Call 116: call 115's A/B showed no change (0.6B 0.667 -> 0.666 ms, 8B 5.357 -> 5.360) where call 114's chain gained
# 0.8 us a layer. Is qkv_rope on the engine's path at all? profile_steps' critical path on both trees (this tree, the
# branch qkv-rope-engine, and .base = main), Qwen3-0.6B `latency`. Carry .whl .commit .base/.commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"; cat "$OUT/gpu.txt"
for m in qwen3-0.6b; do
  for tree in . .base; do
    tag=$([ $tree = . ] && echo new || echo base)
    (cd $tree && timeout --foreground 150 python3 scripts/profile_steps.py --model $m --workload latency --skip 40 \
      --steps 20 > "$OUT/profile_${m}_$tag.txt" 2>&1)
    echo "== $m $tag"; grep -E "^anatomy|critical path" -A9 "$OUT/profile_${m}_$tag.txt" | grep -v Warn | head -14
    echo "done at $SECONDS s"
  done
done
