#!/usr/bin/env bash
# Call 122, reordered for a short budget (session 46: eleven tries found no machine): (1) the engine A/B first, this tree
# (branch ss-stride) against main (.base), Qwen3-0.6B then 8B `latency`, 3 repeats; (2) the 0.6B's critical path
# on this tree; (3) norm_chain.py at both shapes; (4) the GPU tests the change touches. Each step after the A/B
# runs only if DEADLINE (s, default 585) leaves it room. Carry .whl .commit .base/.commit.
source scripts/device_env.sh; require_gpus 1
DEADLINE=${DEADLINE:-585}
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"; cat "$OUT/gpu.txt"
MODELS=qwen3-0.6b,qwen3-8b WORKLOADS=latency REPEAT=3 JOB_S=150 bash scripts/ab_one_gpu.sh 2>&1 | tail -10 \
  | tee "$OUT/ab.txt"
echo "A/B done at $SECONDS s"
if [ $((DEADLINE - SECONDS)) -gt 60 ]; then
  timeout --foreground 60 python3 scripts/profile_steps.py --model qwen3-0.6b --workload latency --skip 40 \
    --steps 40 > "$OUT/profile_qwen3-0.6b_new.txt" 2>&1  # against call 121's main: the layer 20.16 us, gate/up 4.23
  grep -A9 "critical path" "$OUT/profile_qwen3-0.6b_new.txt"; echo "profile done at $SECONDS s"
fi
for shape in 0.6b 8b; do
  [ $((DEADLINE - SECONDS)) -gt 65 ] || break
  timeout --foreground 60 python3 scripts/norm_chain.py --shape $shape 2>&1 | grep -v Warn | tee -a "$OUT/chain.txt"
done
echo "chain done at $SECONDS s"
left=$((DEADLINE - SECONDS))
if [ $left -gt 30 ]; then
  (timeout --foreground $left python3 -m pytest -q tests/test_gpu_kernels.py tests/test_gpu.py \
    -k "fold or summed_norms or norm or float32_greedy" 2>&1 | tail -4) > "$OUT/tests.txt"
  cat "$OUT/tests.txt"
fi
echo "all done at $SECONDS s"
