#!/usr/bin/env bash
# Call 107 (session 42): the GPU tests call 106 did not select, on the same tree (f51947d) and warm card.
source scripts/device_env.sh; require_gpus 1
(timeout --foreground 540 python3 -m pytest -q tests/test_gpu.py tests/test_gpu_kernels.py \
  -k "not (fold or bf16 or 8b_width or float32_greedy or norm_gemv or long_rows or pdl_chain)" 2>&1 | tail -15) > "$OUT/tests.txt"
cat "$OUT/tests.txt"; echo "all done at $SECONDS s"
