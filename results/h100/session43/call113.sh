#!/usr/bin/env bash
# Call 113 (session 43): call 112's one failure, the PDL chain test with summed norms, on three trees, twice each:
# .base (ea2a3b3: the epilogue loads after the sums), .base2 (ff66dff: the loads right after the wait; failed in
# call 112) and this tree (the same, the sums loaded from L2 with .cg). Carry .whl .commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"; cat "$OUT/gpu.txt"
for tree in .base .base2 .; do
  for i in 1 2; do
    echo "== $tree run $i at $SECONDS s"
    (cd $tree && PYTHONPATH=/tmp/site:$PWD timeout --foreground 90 python3 -m pytest -q -x tests/test_gpu_kernels.py \
      -k "summed_norms or pdl_chain_in_a" 2>&1 | grep -E "^E |passed|failed" | head -12)
  done
done 2>&1 | tee "$OUT/tests.txt"
echo "all done at $SECONDS s"
