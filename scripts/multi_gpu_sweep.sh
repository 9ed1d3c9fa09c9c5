#!/usr/bin/env bash
# Issue 8, for a multi-GPU kind (nvidia-h200-x2/-x4/-x8): every control plane at tp=1..N on nano-vllm's bench
# and on the latency workload, the broadcast workload, and float32 greedy equality of tp=N with tp=1.
# Usage (device tool, kind chosen there): bash scripts/multi_gpu_sweep.sh; CSVs and logs land in $OUT.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # never NVLink multicast
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TPCP_CACHE=/tmp/tpcp-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
N=$(python3 -c "import torch; print(torch.cuda.device_count())")
TPS=$(python3 -c "print(','.join(str(t) for t in (1, 2, 4, 8) if t <= $N))")
CONTROLS=${CONTROLS:-shm,queue,pipe,gloo,ring}
nvidia-smi topo -m > "$OUT/topology.txt" 2>&1
python3 -m pytest -q tests/test_gpu.py > "$OUT/pytest_gpu.txt" 2>&1
python3 -m harness -m workload=bench model=qwen3-0.6b device=cuda control=$CONTROLS tp=$TPS repeat=3 \
  results_dir="$OUT" progress=false > "$OUT/bench.log" 2>&1
python3 -m harness -m workload=bench model=qwen3-8b device=cuda control=$CONTROLS tp=${TPS##*,} repeat=3 \
  results_dir="$OUT" progress=false > "$OUT/bench_8b.log" 2>&1
python3 -m harness -m workload=latency workload.num_seqs=1,8 model=qwen3-0.6b device=cuda control=$CONTROLS \
  tp=$TPS repeat=3 results_dir="$OUT" progress=false > "$OUT/latency.log" 2>&1
python3 -m harness -m workload=broadcast control=$CONTROLS tp=$(echo $TPS | sed 's/^1,//') repeat=3 \
  results_dir="$OUT" progress=false > "$OUT/broadcast.log" 2>&1
python3 -m harness.analyze "$OUT/runs.csv" --plot "$OUT/runs.png" > "$OUT/table.md" 2>&1
tail -40 "$OUT/table.md"
