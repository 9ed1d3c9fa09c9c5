#!/usr/bin/env bash
# Call 114 (prepared in session 43, not run: its budget was spent): (1) the PDL chain test with summed norms, now in
# float32 with a 1e-4 bar (in bfloat16 the atomics' order alone moved two plain runs ~1% apart, call 113), three
# times; the qkv_rope GPU tests; (2) scripts/norm_chain.py --context: a batch-1 chain of layers with decode attention,
# the q/k norm and RoPE in the decode kernel (the engine's) against qkv_rope (QKV's epilogue), at the `latency`
# workload's contexts, both models' shapes. Carry .whl .commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"; cat "$OUT/gpu.txt"
for i in 1 2 3; do
  timeout --foreground 60 python3 -m pytest -q -x tests/test_gpu_kernels.py -k "summed_norms or qkv_rope" \
    2>&1 | grep -E "^E |passed|failed" | head -8
done 2>&1 | tee "$OUT/tests.txt"
for shape in 0.6b 8b; do
  for ctx in 64 96 160; do
    timeout --foreground 120 python3 scripts/norm_chain.py --shape $shape --context $ctx 2>&1 | grep -v Warn
  done
done | tee "$OUT/chain.txt"
echo "all done at $SECONDS s"
