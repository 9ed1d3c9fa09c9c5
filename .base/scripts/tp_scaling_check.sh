#!/usr/bin/env bash
# What tp=2 costs and gains against tp=1 on two GPUs (device tool, nvidia-h200-x2): the GPU tests
# (multi-GPU included; TEST_ARGS for pytest options, TEST_S its time limit), the all-reduce size table
# (scripts/all_reduce_sizes.py: NCCL with its default, LL and LL128 protocols against symmetric memory's
# one-shot and two-shot, us per call, 2 KiB to 64 MiB), tp=1 against tp=2 on Qwen3-0.6B (latency batch 1,
# 3 repeats, and bench; JOB_S limits each), and a profile of the tp=2 batch-1 decode step
# (scripts/profile_steps.py). The results of results/h200x2/ (all_reduce_*.md, profile_tp2_b1.txt).
# Run from the repository root:
#   bash scripts/tp_scaling_check.sh
#   TEST_ARGS="-k symm_mem" JOB_S=120 bash scripts/tp_scaling_check.sh
# Everything lands in $OUT (rows in runs.csv); the last lines printed are the summary.
set -uo pipefail
source scripts/device_env.sh
require_gpus 2
nvidia-smi topo -m > "$OUT/topology.txt" 2>&1
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__,
'transformers', transformers.__version__, 'nccl', torch.cuda.nccl.version())" | tee "$OUT/versions.txt"
timeout --foreground ${TEST_S:-300} python3 -m pytest -q tests/test_gpu.py ${TEST_ARGS:-} > "$OUT/pytest_gpu.txt" 2>&1
tail -3 "$OUT/pytest_gpu.txt"
for proto in default LL LL128; do
  env $([ $proto = default ] || echo NCCL_PROTO=$proto) timeout --foreground 120 python3 -m torch.distributed.run \
    --nproc-per-node=2 scripts/all_reduce_sizes.py --out "$OUT/all_reduce_$proto.md" > "$OUT/all_reduce_$proto.log" 2>&1
done
run() { timeout --foreground ${JOB_S:-200} python3 -m harness device=cuda progress=false results_dir="$OUT" "$@" 2>&1 \
  | grep -v "it/s]" >> "$OUT/harness.log"; }
run -m workload=latency workload.num_seqs=1 workload.iterations=5 model=qwen3-0.6b tp=1,2 repeat=3
run -m workload=bench model=qwen3-0.6b tp=1,2
timeout --foreground 150 python3 scripts/profile_steps.py --workload latency --num-seqs 1 --tp 2 --skip 30 --steps 50 \
  > "$OUT/profile_tp2_b1.txt" 2>&1
rm -f "$OUT"/*.lock
cat "$OUT/all_reduce_default.md"; grep -h "^| [0-9]" "$OUT"/all_reduce_LL*.md | cut -d'|' -f2,3
head -3 "$OUT/profile_tp2_b1.txt"
python3 -m harness.analyze "$OUT/runs.csv" 2>&1 | tail -8
