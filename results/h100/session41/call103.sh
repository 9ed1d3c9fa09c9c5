#!/usr/bin/env bash
# Call 103 (session 41): mid = .mid (d89f466, call 102's engine) against new = . (the sampler with PDL, RoPE's
# table read in the decode kernel, the final norm in the PDL chain at batch 1): Qwen3-0.6B latency, latency-4k,
# latency-b8, 3 repeats each; then the GPU tests on new. Carry .whl .commit .mid/.commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
timeout 300 python3 -m harness.checkpoint qwen3-0.6b > /dev/null 2>&1 || echo "preset failed"
R=$(mktemp -d)
for t in mid:.mid new:.; do g=${t%%:*}; d=${t#*:}
  (cd $d && PYTHONPATH=/tmp/site:$PWD TPCP_GIT_COMMIT=$(cat .commit) timeout -k 10 150 python3 -m harness -m \
    model=qwen3-0.6b tp=1 device=cuda workload=latency,latency-4k,latency-b8 repeat=3 tag=$g progress=false \
    results_dir=$R results_file=ab.csv > $R/$g.log 2>&1)
  echo "$g exit $? at $SECONDS s"; cp $R/ab*.csv "$OUT"/; { echo "== $g"; tail -12 $R/$g.log; } >> "$OUT/logs.txt"
done
python3 - "$OUT" <<'PY'
import glob, sys
import pandas as pd
d = pd.concat([pd.read_csv(f) for f in glob.glob(f"{sys.argv[1]}/ab*.csv")])
print((d.status != "ok").sum(), "failed rows")
print(d.pivot_table(index="workload", columns="tag", values="tpot_ms_p50", aggfunc="median").round(4))
PY
(timeout 280 python3 -m pytest -q tests/test_gpu.py tests/test_gpu_kernels.py 2>&1 | tail -4) > "$OUT/tests.txt"
cat "$OUT/tests.txt"
