#!/usr/bin/env bash
# Call 139 (prepared in session 57, after call 138): the Qwen3-8B's critical path per layer stage with the wide
# tile at one split (.mid: `git archive 2d2ddb8`, any group) and without (.base: `git archive ab780bb`), at 72-112
# tokens (one split of 128 against two of 64), then the 0.6B's on both as the control. Tests the guess in NOTES
# ("The 8B's loss on paper"): the decode stage's critical-path share grows with the wide tile at the 8B only.
# Carry .whl .commit .base .base/.commit .mid .mid/.commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$OUT/gpu.txt"
for model in qwen3-8b qwen3-0.6b; do
  timeout --foreground 300 python3 -m harness.checkpoint $model > /dev/null 2>&1 || echo "$model: preset failed"
  for tree in .base .mid; do
    in_tree $tree timeout --foreground 120 python3 scripts/profile_steps.py --model $model --workload latency \
      --skip 40 --steps 40 > "$OUT/profile_${model}_${tree#.}.txt" 2>&1
    echo "== $model $tree at $SECONDS s"; grep -A9 "critical path" "$OUT/profile_${model}_${tree#.}.txt"
  done
done
echo "all done at $SECONDS s"
