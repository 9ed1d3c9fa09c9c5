#!/usr/bin/env bash
# workload=serve on the device host's CPUs (device=cpu): every plane on the CPU ladder, at each tp of TPS,
# the planes of one tp run as parallel harness processes (PARALLEL at a time, default cores / tp, so that
# ranks never outnumber cores; cpu_threads=1), each in its own folder; the rows are then gathered into
# $OUT/serve_host_tp<k>.csv and the logs into $OUT/serve_host_logs_tp<TPS>.tgz.
#   TPS=2 REPEAT=2 bash scripts/serve_host.sh; TPS=4 REPEAT=1 bash scripts/serve_host.sh
set -uo pipefail
source scripts/device_env.sh
TPS=${TPS:-2}; RATES=${RATES:-2,4,8,16,inf}
CONTROLS=${CONTROLS:-ideal,shm,queue,pipe,gloo,ring,zmq,hybrid}
python3 -m harness.checkpoint qwen3-tiny > /dev/null || { echo "qwen3-tiny preset failed"; exit 1; }
for tp in ${TPS//,/ }; do
  parallel=${PARALLEL:-$(( $(nproc) / tp > 0 ? $(nproc) / tp : 1 ))}
  for control in ${CONTROLS//,/ }; do
    while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n; done
    OUT="$OUT/tp${tp}_$control" DEVICE=cpu MODELS=qwen3-tiny TPS=$tp CONTROLS=$control RATES=$RATES \
      bash scripts/serve_ladder.sh cpu_threads=1 "$@" > "$OUT/tp${tp}_$control.txt" 2>&1 &
  done
  wait
  python3 - "$OUT" "$tp" <<'PY'
import glob, sys
import pandas as pd
out, tp = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(f"{out}/tp{tp}_*/serve.csv"))
rows = [pd.read_csv(f, dtype=str, keep_default_na=False) for f in files]  # cells as written: "122e2019" is no float
pd.concat(rows).to_csv(f"{out}/serve_host_tp{tp}.csv", index=False)
print(f"tp={tp}: {len(files)} planes gathered into serve_host_tp{tp}.csv")
PY
  echo "tp=$tp done at $SECONDS s"
done
(cd "$OUT" && tar czf "serve_host_logs_tp${TPS//,/_}.tgz" tp*_* && rm -rf tp*_*)
