#!/usr/bin/env bash
# Call 124 (the warm H100 of call 123, right after it; run as one command line): profile_steps' critical path of
# Qwen3-0.6B `latency` on ss-rule (this tree) and main (.base). Carry .whl .commit .base/.commit.
source scripts/device_env.sh; for t in new base; do tree=$([ $t = new ] && echo . || echo .base); in_tree $tree timeout --foreground 130 python3 scripts/profile_steps.py --model qwen3-0.6b --workload latency --skip 40 --steps 40 > "$OUT/profile_$t.txt" 2>&1; echo "== $t at $SECONDS s"; grep -E "critical path" -A9 "$OUT/profile_$t.txt" | grep -v Warn | head -12; done
