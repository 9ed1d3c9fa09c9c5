#!/usr/bin/env bash
# Call 110 (session 43): Qwen3-0.6B and 8B `latency` A/B, base .base (62e664a: call 97's tree, measured on an H200)
# against this tree (sessions 40-42's engine); then the batch-1 step's critical path by stage
# (scripts/profile_steps.py) for both models; then the PDL chain test with the summed norms (new in session 42).
# Carry .whl .commit .base/.commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"; cat "$OUT/gpu.txt"
MODELS=qwen3-0.6b,qwen3-8b WORKLOADS=latency REPEAT=3 JOB_S=200 bash scripts/ab_one_gpu.sh 2>&1 | tail -12 | tee "$OUT/ab.txt"
echo "A/B done at $SECONDS s"
for m in qwen3-0.6b qwen3-8b; do
  timeout --foreground 100 python3 scripts/profile_steps.py --model $m --workload latency --skip 40 --steps 20 \
    > "$OUT/profile_$m.txt" 2>&1
  grep -A12 "critical path" "$OUT/profile_$m.txt"; echo "profile $m done at $SECONDS s"
done
left=$((585 - SECONDS)); [ $left -gt 30 ] || left=30
(timeout --foreground $left python3 -m pytest -q tests/test_gpu.py tests/test_gpu_kernels.py -k "pdl_chain" 2>&1 \
  | tail -6) > "$OUT/tests.txt"
cat "$OUT/tests.txt"; echo "all done at $SECONDS s"
