#!/usr/bin/env bash
# Old against new code in one device call: the same harness sweep on BASE (an older commit's tree, made here
# with `rm -rf .base && mkdir .base && git archive <commit> | tar -x -C .base && echo <commit> > .base/.commit`;
# name ".base/.commit" in the call's carry: the base tree's own .gitignore hides it) and then on this tree, rows
# tagged base / new in $OUT/$CSV (default ab.csv), each with its tree's commit; then the
# medians of the two side by side. Workload presets missing from BASE are copied into it from this tree.
# VARIANT="TAG OVERRIDE..." runs this tree once more with those overrides, rows tagged TAG. TREES="DIR:TAG ..."
# (default ".base:base .:new") names the trees and their tags, in run order: a third, ".mid:mid", made as .base is
# and carried likewise, measures two changes in one call.
#   MODELS=qwen3-0.6b WORKLOADS=latency,latency-b8,latency-4k,bench REPEAT=3 bash scripts/ab_one_gpu.sh
set -uo pipefail
source scripts/device_env.sh
require_gpus 1
TREES=${TREES:-.base:base .:new}
for tree in $TREES; do
  dir=${tree%%:*}; [ "$dir" = . ] && continue
  [ -d "$dir" ] || { echo "error: ab_one_gpu.sh compares with a $dir tree and there is none (see its header)" >&2; exit 2; }
  [ -s "$dir/.commit" ] || { echo "error: $dir/.commit is missing: carry it (see ab_one_gpu.sh's header)" >&2; exit 2; }
  for f in conf/workload/*.yaml; do [ -e "$dir/$f" ] || cp "$f" "$dir/$f"; done
done
CSV=${CSV:-ab.csv}; MODELS=${MODELS:-qwen3-0.6b}; WORKLOADS=${WORKLOADS:-latency,latency-4k,bench}
check_overrides device=cuda model=${MODELS%%,*} tp=1 workload=${WORKLOADS%%,*} "$@"
# The harness writes into $RUNS, new for each invocation (a run file per row, Hydra's folders, the full logs; a
# warm machine keeps /tmp between calls): the device returns 8 files of $OUT, so $OUT gets only the CSVs, copied
# after every job, and the logs' last lines in <name>_logs.txt.
RUNS=${RUNS:-$(mktemp -d /tmp/ab_runs.XXXXXX)}; mkdir -p "$RUNS"
run() {  # tree tag model: one multirun, its log in $RUNS/ab_<tag>_<model>.log
  local log="$RUNS/ab_$2_$3.log" rc
  in_tree "$1" timeout --foreground -k 10 ${JOB_S:-300} python3 -m harness -m model=$3 tp=1 device=cuda \
    workload=$WORKLOADS repeat=${REPEAT:-3} tag=$2 progress=false results_dir="$RUNS" results_file="$CSV" "${@:4}" \
    > "$log" 2>&1
  rc=$?
  cp "$RUNS/${CSV%.csv}"*.csv "$OUT"/ 2>/dev/null
  { echo "== $2 $3: exit $rc"; tail -n 15 "$log"; } >> "$OUT/${CSV%.csv}_logs.txt"
  echo "$2 $3: exit $rc at $SECONDS s"
}
for model in ${MODELS//,/ }; do
  timeout --foreground -k 10 300 python3 -m harness.checkpoint $model > /dev/null 2>&1 || { echo "$model: preset failed"; continue; }
  for tree in $TREES; do run "${tree%%:*}" "${tree#*:}" $model "$@"; done
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
rm -f "$RUNS"/*.lock
