#!/usr/bin/env bash
# Call 130 (session 52): main measured on whichever card comes (named nvidia-h200; since call 97 nearly every call got
# an H100), every issue-27 quantity in one call, each beside the floor of the card it ran on: the copy bandwidth
# measured first; `latency` for Qwen3-0.6B and Qwen3-8B (3 repeats), `latency-4k` for the 0.6B (2), the decode
# kernel at batch 1-8 x 4k/32k (call 99's grid), `bench` for the 0.6B (2) and the 8B (1). Carry .whl .commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv | tee "$OUT/gpu.txt"
python3 - <<'PY' 2>&1 | tee "$OUT/copy.txt"
import torch
x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
ms = []
for _ in range(10):
    a.record(); y.copy_(x); b.record(); b.synchronize(); ms.append(a.elapsed_time(b))
ms.sort()
print(f"device copy {x.numel() / 2**30:.0f} GiB: median {ms[5]:.3f} ms = {2 * x.numel() / ms[5] / 1e9:.2f} TB/s "
      f"(read + written; min {ms[0]:.3f}, max {ms[-1]:.3f} ms)")
PY
for model in qwen3-0.6b qwen3-8b; do
  timeout --foreground 200 python3 -m harness.checkpoint $model > /dev/null 2>&1 || echo "$model: preset failed"
done
echo "presets at $SECONDS s"
h() { timeout --foreground -k 10 "$1" python3 -m harness "${@:2}" tp=1 device=cuda progress=false results_dir=/tmp/c130 \
  results_file=call130.csv > "$OUT/run_$SECONDS.txt" 2>&1; grep -h -A1 "^  floor" "$OUT/run_$SECONDS.txt"
  cp /tmp/c130/call130*.csv "$OUT"/; echo "at $SECONDS s"; }
h 250 -m model=qwen3-0.6b,qwen3-8b workload=latency repeat=3
timeout --foreground 60 python3 scripts/bench_decode_kernel.py --shape 8b-tp1,0.6b --batch 1,2,4,8 \
  --contexts 4096,32768 --pdl --default-only --splits auto 2>&1 | grep -v Warn | tee "$OUT/kernel.txt"
h 60 -m model=qwen3-0.6b workload=latency-4k repeat=2
h 110 -m model=qwen3-0.6b workload=bench repeat=2
h 130 model=qwen3-8b workload=bench
python3 - "$OUT/call130.csv" <<'PY'
import sys
import pandas as pd
d = pd.read_csv(sys.argv[1])
g = d.groupby(["model", "workload", "status"])[["tpot_ms_p50", "output_tok_s", "j_per_output_token"]]
print(g.agg(["median", "min", "max", "count"]).round(3).to_string())
PY
echo "all done at $SECONDS s"
