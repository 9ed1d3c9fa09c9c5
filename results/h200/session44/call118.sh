#!/usr/bin/env bash
# Call 118 (branch ss-slots): the GEMV's add epilogue at batch 1, plain / one-slot atomic (the engine's) / 32 slots /
# no atomic, o_proj and down of both models (results/h200/session44/gemv_epilogue.py). Carry .whl .commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"; cat "$OUT/gpu.txt"
timeout --foreground 240 python3 results/h200/session44/gemv_epilogue.py 2>&1 | grep -v Warn | tee "$OUT/epilogue.txt"
echo "all done at $SECONDS s"
