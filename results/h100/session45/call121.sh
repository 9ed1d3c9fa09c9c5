#!/usr/bin/env bash
# Call 121: where the 0.6B's 33 us went with 32 slots (calls 119-120): profile_steps' critical path, Qwen3-0.6B
# `latency`: this tree (ss-slots, 32 slots), a copy of it with SUM_SLOTS = 1 (.s1), and .base (main).
# Carry .whl .commit .base/.commit. Predictions in NOTES.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"; cat "$OUT/gpu.txt"
m=qwen3-0.6b
rm -rf .s1 && mkdir .s1 && cp -r engine scripts harness backends runtime conf pyproject.toml .commit .s1/ 2>/dev/null
sed -i 's/^SUM_SLOTS = 32$/SUM_SLOTS = 1/' .s1/engine/layers/gemm.py; grep -n '^SUM_SLOTS' .s1/engine/layers/gemm.py
for tree in . .s1 .base; do
  tag=$([ $tree = . ] && echo new || { [ $tree = .s1 ] && echo s1 || echo base; })
  (cd $tree && PYTHONPATH=/tmp/site:$PWD timeout --foreground 150 python3 scripts/profile_steps.py --model $m \
    --workload latency --skip 40 --steps 40 > "$OUT/profile_${m}_$tag.txt" 2>&1)
  echo "== $m $tag"; grep -E "^anatomy|critical path" -A9 "$OUT/profile_${m}_$tag.txt" | grep -v Warn | head -14
  echo "done at $SECONDS s"
done
