#!/usr/bin/env bash
# Call 117: call 116 again with each tree on its own PYTHONPATH (call 116 ran this tree's engine from .base too:
# device_env.sh's PYTHONPATH names the root). profile_steps' critical path, Qwen3-0.6B `latency`, this tree (the
# branch qkv-rope-engine) and .base (main). Carry .whl .commit .base/.commit. Prediction: base slot 5 is _gemv_kernel
# ~2.2 us and the decode kernel ~5 us; new: QKV +1.3 us, decode -1.3 us, the layer within 0.3 us of base (call 115).
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"; cat "$OUT/gpu.txt"
m=qwen3-0.6b
for tree in . .base; do
  tag=$([ $tree = . ] && echo new || echo base)
  (cd $tree && PYTHONPATH=/tmp/site:$PWD timeout --foreground 150 python3 scripts/profile_steps.py --model $m \
    --workload latency --skip 40 --steps 40 > "$OUT/profile_${m}_$tag.txt" 2>&1)
  echo "== $m $tag"; grep -E "^anatomy|critical path" -A9 "$OUT/profile_${m}_$tag.txt" | grep -v Warn | head -14
  echo "done at $SECONDS s"
done
