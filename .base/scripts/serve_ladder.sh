#!/usr/bin/env bash
# workload=serve on a request-rate ladder (device tool or any machine), rows in $OUT/$CSV (default serve.csv):
#   1. OFFLINE=1: per model, bench and serve at request_rate=inf on bench's own 256 requests, REPEAT times each,
#      one engine (the request-level loop's cost offline: serve's tok/s beside bench's)
#   2. per model, plane and tp: one sweep over RATES (one engine), REPEAT timed runs per rate
#   3. the medians per configuration and rate, printed
# Extra arguments are harness overrides for every run. Run from the repository root:
#   MODELS=qwen3-0.6b RATES=5,10,20,40,80,inf NUM_PROMPTS=200 OFFLINE=1 bash scripts/serve_ladder.sh
#   DEVICE=cpu MODELS=qwen3-tiny TPS=2,4 CONTROLS=ideal,shm,ring RATES=2,4,8,16,inf bash scripts/serve_ladder.sh
set -uo pipefail
source scripts/device_env.sh
CSV=${CSV:-serve.csv}; DEVICE=${DEVICE:-cuda}; REPEAT=${REPEAT:-3}; TAG=${TAG:-serve}
TPS=${TPS:-1}; CONTROLS=${CONTROLS:-shm}; MODELS=${MODELS:-qwen3-0.6b}
[ "$DEVICE" = cuda ] && require_gpus 1
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
harness() {  # a harness run, its log appended to $OUT/<model>.log, the summary lines shown
  local log=$1; shift  # (a multirun always: one engine for the jobs of a call)
  timeout --foreground -k 10 ${JOB_S:-560} python3 -m harness -m device=$DEVICE progress=false results_dir="$OUT" results_file="$CSV" \
    repeat=$REPEAT tag=$TAG "$@" >> "$OUT/$log.log" 2>&1
  echo "exit $? at $SECONDS s: $*"
}
for model in ${MODELS//,/ }; do
  timeout --foreground -k 10 300 python3 -m harness.checkpoint $model > /dev/null 2>&1 || { echo "$model: preset failed"; continue; }
  if [ "${OFFLINE:-0}" = 1 ]; then
    harness $model model=$model tp=1 control=shm workload=bench,serve ++workload.num_prompts=256 \
      ++workload.request_rate=inf "$@"
  fi
  for tp in ${TPS//,/ }; do for control in ${CONTROLS//,/ }; do
    harness $model model=$model tp=$tp control=$control workload=serve workload.request_rate=${RATES:-inf} \
      ${NUM_PROMPTS:+workload.num_prompts=$NUM_PROMPTS} "$@"
  done; done
done
python3 - "$OUT/$CSV" <<'EOF'
import sys
import pandas as pd
d = pd.read_csv(sys.argv[1])
print(f"{(d.status != 'ok').sum()} failed row(s)", *d[d.status != "ok"].error.unique()[:3], sep="\n  ")
d = d[d.status == "ok"].fillna({"request_rate": -1})
cols = ["output_tok_s", "req_s", "achieved_rate_req_s", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99",
        "decode_step_ms_p50", "queue_ms_p50", "serve_loop_us_per_step"]
with pd.option_context("display.width", 250, "display.max_columns", 30):
    print(d.groupby(["model", "tp", "control", "workload", "request_rate"])[cols].median().round(3).to_string())
EOF
rm -f "$OUT"/*.lock
