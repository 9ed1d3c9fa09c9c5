#!/usr/bin/env bash
# Call 114 (session 43): the PDL chain test with summed norms, now in float32 with a 1e-4 bar (in bfloat16 the
# atomics' order alone moved two plain runs 1.0-1.05% apart, call 113), three times, on this tree (ff66dff's engine).
# Carry .whl .commit.
source scripts/device_env.sh; require_gpus 1
for i in 1 2 3; do
  echo "== run $i at $SECONDS s"
  timeout --foreground 60 python3 -m pytest -q -x tests/test_gpu_kernels.py -k "summed_norms or pdl_chain_in_a" \
    2>&1 | grep -E "^E |passed|failed" | head -8
done 2>&1 | tee "$OUT/tests.txt"
echo "all done at $SECONDS s"
