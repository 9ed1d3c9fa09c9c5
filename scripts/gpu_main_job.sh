#!/usr/bin/env bash
# On the H200 machine (device tool): install the carried wheels, check the CUDA path against transformers,
# then run the main job on the full benchmark. Logs and the CSV land in $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TPCP_CACHE=/tmp/tpcp-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
python3 -m pytest -q -x tests/test_gpu.py tests/test_correctness.py -k "cuda or tp0 or (greedy and 1-tiny_untied)" 2>&1 | tail -5 | tee "$OUT/pytest.txt"
python3 -m harness control=shm tp=1 device=cuda model=qwen3-0.6b workload=bench results_dir="$OUT" progress=false "$@" 2>&1 | tee "$OUT/main_job.log" | grep -v "it/s]"
