#!/usr/bin/env bash
# Call 102 (session 41): three trees in one call. old = .base (82d3bb0, before session 40's split rule),
# mid = .mid (2c4a429, session 40's head), new = . (the one-row k norm). Kernel alone at batch 1 on mid and new,
# then Qwen3-0.6B latency + bench (3 repeats) on mid and new, bench on old. Carry .whl .commit .base/.commit .mid/.commit.
source scripts/device_env.sh; require_gpus 1
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
timeout 300 python3 -m harness.checkpoint qwen3-0.6b > /dev/null 2>&1 || echo "preset failed"
for t in mid:.mid new:.; do g=${t%%:*}; d=${t#*:}
  for l in 64,2,2 64,4,2 64,8,2; do
    (cd $d && PYTHONPATH=/tmp/site:$PWD timeout 90 python3 scripts/bench_decode_kernel.py --shape 0.6b,8b-tp1 \
      --batch 1 --contexts 160,4096 --pdl --qk-norm --splits auto --launch $l 2>&1 | grep -v "^$" | sed "s/^/$g $l | /")
  done
done > "$OUT/kernel.txt"; echo "kernel done at $SECONDS s"
R=$(mktemp -d)
job() {  # tag dir workloads
  (cd $2 && PYTHONPATH=/tmp/site:$PWD TPCP_GIT_COMMIT=$(cat .commit) timeout -k 10 ${4:-200} python3 -m harness -m \
    model=qwen3-0.6b tp=1 device=cuda workload=$3 repeat=3 tag=$1 progress=false results_dir=$R results_file=ab.csv \
    > $R/$1.log 2>&1); echo "$1 exit $? at $SECONDS s"; cp $R/ab*.csv "$OUT"/; { echo "== $1"; tail -8 $R/$1.log; } >> "$OUT/logs.txt"
}
job mid .mid latency,bench; job new . latency,bench; job old .base bench 150
(timeout 150 python3 -m pytest -q tests/test_gpu.py tests/test_gpu_kernels.py -k "paged_decode or qk_norm or transformers" 2>&1 | tail -3) > "$OUT/tests.txt"; cat "$OUT/tests.txt"
python3 - "$OUT" <<'PY'
import glob, sys
import pandas as pd
d = pd.concat([pd.read_csv(f) for f in glob.glob(f"{sys.argv[1]}/ab*.csv")])
print((d.status != "ok").sum(), "failed rows")
for c in ("tpot_ms_p50", "output_tok_s"):
    print(d.pivot_table(index="workload", columns="tag", values=c, aggfunc="median").round(4))
PY
