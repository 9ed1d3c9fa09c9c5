#!/usr/bin/env bash
# Call 129 (session 51): main as it is, measured on an H200, to replace the estimates that issue 27's table has
# carried since call 97 (H100 ratios since). On an H200: `latency` for Qwen3-0.6B and Qwen3-8B (3 repeats each),
# `bench` for Qwen3-0.6B (2 repeats) and Qwen3-8B (1), the decode kernel at the 8B heads' 1 x 4k cell. On any other
# card the timings would not answer that, so it runs the GPU tests of main instead. Carry .whl .commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv | tee "$OUT/gpu.txt"
if ! grep -q H200 "$OUT/gpu.txt"; then
  timeout --foreground 540 python3 -m pytest -q -rs tests/test_gpu.py tests/test_gpu_kernels.py 2>&1 | tail -25 \
    | tee "$OUT/pytest_gpu.txt"
  exit 0
fi
for model in qwen3-0.6b qwen3-8b; do
  timeout --foreground 200 python3 -m harness.checkpoint $model > /dev/null 2>&1 || echo "$model: preset failed"
done
echo "presets at $SECONDS s"
h() { timeout --foreground -k 10 "$1" python3 -m harness "${@:2}" tp=1 device=cuda progress=false results_dir=/tmp/c129 \
  results_file=call129.csv 2>&1 | grep -v "it/s]" | tail -4; cp /tmp/c129/call129*.csv "$OUT"/; echo "at $SECONDS s"; }
h 260 -m model=qwen3-0.6b,qwen3-8b workload=latency repeat=3
timeout --foreground 60 python3 scripts/bench_decode_kernel.py --shape 8b-tp1,0.6b --batch 1 --contexts 4096 --pdl \
  --default-only --splits auto 2>&1 | grep -v Warn | tee "$OUT/kernel_4k.txt"
h 150 -m model=qwen3-0.6b workload=bench repeat=2
h 150 model=qwen3-8b workload=bench
python3 - "$OUT/call129.csv" <<'PY'
import sys
import pandas as pd
d = pd.read_csv(sys.argv[1])
print(d.groupby(["model", "workload", "status"])[["tpot_ms_p50", "output_tok_s"]].agg(["median", "min", "max", "count"]).round(3).to_string())
PY
echo "all done at $SECONDS s"
