#!/usr/bin/env bash
# Call 104 (session 41): Qwen3-8B batch 1, two trees: base = .base (e3fe666: the norm kernel, then the GEMV), new = .
# (the GEMV before each norm adds the residual; the norm fused into the next GEMV at 8 warps). latency, 3 repeats
# each; then the GPU tests the change touches. Carry .whl .commit .base/.commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
timeout 300 python3 -m harness.checkpoint qwen3-8b > /dev/null 2>&1 || echo "preset failed"
echo "checkpoint at $SECONDS s"
R=$(mktemp -d)
for t in base:.base new:.; do g=${t%%:*}; d=${t#*:}
  (cd $d && PYTHONPATH=/tmp/site:$PWD TPCP_GIT_COMMIT=$(cat .commit) timeout -k 10 150 python3 -m harness -m \
    model=qwen3-8b tp=1 device=cuda workload=latency repeat=3 tag=$g progress=false results_dir=$R \
    results_file=ab.csv > $R/$g.log 2>&1)
  echo "$g exit $? at $SECONDS s"; cp $R/ab*.csv "$OUT"/; { echo "== $g"; tail -8 $R/$g.log; } >> "$OUT/logs.txt"
done
python3 - "$OUT" <<'PY'
import glob, sys
import pandas as pd
d = pd.concat([pd.read_csv(f) for f in glob.glob(f"{sys.argv[1]}/ab*.csv")])
print((d.status != "ok").sum(), "failed rows")
print(d.groupby("tag")[["tpot_ms_p50", "decode_step_ms_p50"]].agg(list).to_string())
PY
(timeout 120 python3 -m pytest -q tests/test_gpu.py tests/test_gpu_kernels.py -k "gemv or norm or bf16 or wide" \
  2>&1 | tail -4) > "$OUT/tests.txt"; cat "$OUT/tests.txt"
