#!/usr/bin/env bash
# Old against new code in one device call: the same harness sweep on BASE (an older commit's tree, made here
# with `rm -rf .base && mkdir .base && git archive <commit> | tar -x -C .base && echo <commit> > .base/.commit`,
# carried as .base) and then on this tree, rows tagged base / new in $OUT/$CSV (default ab.csv); then the
# medians of the two side by side. Workload presets missing from BASE are copied into it from this tree.
# VARIANT="TAG OVERRIDE..." runs this tree once more with those overrides, rows tagged TAG.
#   MODELS=qwen3-0.6b WORKLOADS=latency,latency-b8,latency-4k,bench REPEAT=3 bash scripts/ab_one_gpu.sh
set -uo pipefail
source scripts/device_env.sh
require_gpus 1
CSV=${CSV:-ab.csv}; MODELS=${MODELS:-qwen3-0.6b}; WORKLOADS=${WORKLOADS:-latency,latency-4k,bench}
[ -d .base ] || { echo "error: ab_one_gpu.sh compares with a .base tree and there is none (see its header)" >&2; exit 2; }
for f in conf/workload/*.yaml; do [ -e ".base/$f" ] || cp "$f" ".base/$f"; done
run() {  # tree tag model: one multirun, its log in $OUT/ab_<tag>_<model>.log
  (cd "$1" && PYTHONPATH=/tmp/site:$PWD TPCP_GIT_COMMIT=$(cat .commit 2>/dev/null || echo "$TPCP_GIT_COMMIT") \
    timeout --foreground -k 10 ${JOB_S:-300} python3 -m harness -m model=$3 tp=1 device=cuda workload=$WORKLOADS \
    repeat=${REPEAT:-3} tag=$2 progress=false results_dir="$OUT" results_file="$CSV" "${@:4}" \
    > "$OUT/ab_$2_$3.log" 2>&1)
  echo "$2 $3: exit $? at $SECONDS s"
}
for model in ${MODELS//,/ }; do
  timeout --foreground -k 10 300 python3 -m harness.checkpoint $model > /dev/null 2>&1 || { echo "$model: preset failed"; continue; }
  run .base base $model "$@"
  run . new $model "$@"
  if [ -n "${VARIANT:-}" ]; then read -r vtag vargs <<< "$VARIANT"; run . "$vtag" $model "$@" $vargs; fi
done
python3 - "$OUT" "${CSV%.csv}" <<'PY'
import glob, sys
import pandas as pd
# the two trees may write different schemas: the harness then puts the new one's rows in <name>.schema<N>-*.csv
d = pd.concat([pd.read_csv(f) for f in sorted(glob.glob(f"{sys.argv[1]}/{sys.argv[2]}*.csv"))])
print(f"{(d.status != 'ok').sum()} failed row(s)", *d[d.status != "ok"].error.unique()[:3], sep="\n  ")
d = d[d.status == "ok"]
cols = ["tpot_ms_p50", "itl_ms_p50", "ttft_ms_p50", "output_tok_s", "decode_step_ms_p50"]
m = d.groupby(["model", "workload", "tag"])[[c for c in cols if c in d]].median().unstack("tag")
with pd.option_context("display.width", 200, "display.max_columns", 20):
    print(m.round(3).to_string())
PY
rm -f "$OUT"/*.lock
