#!/usr/bin/env bash
# Issue 12: the decode matmul (llm.gemm) on the H200s: the Triton GEMV against cuBLAS.
#   1. scripts/bench_gemv.py on GPU 0 (every layer shape of both models at tp=1 and 2, batch 1, and the tile
#      sweep unless SWEEP=0) -> $OUT/gemv.md, while the presets are drawn on GPU 1;
#   2. the engine, one harness process per (model, tp, gemm) so that every tp=2 engine gets symmetric memory
#      (layers/all_reduce.py): latency at batch 1 and 8, REPEAT repeats -> $OUT/${CSV:-gemm_ab.csv}.
#      llm.max_num_seqs=8: only the batch sizes these workloads use are captured (start-up in seconds), the
#      same for both arms.
#   MODELS=qwen3-0.6b,qwen3-8b TPS=1,2 GEMMS=auto,cublas REPEAT=3 bash scripts/gemm_ab.sh
# Other knobs: WORKLOADS (latency,latency-b8), ITER (5 iterations per repeat), CSV (gemm_ab.csv); time limits
# in seconds: BENCH_S (200, the bench), JOB_S (120, each harness process), TOTAL_S (560: no job starts later).
set -uo pipefail
source scripts/device_env.sh
require_gpus 2
mkdir -p "$OUT/logs"
MODELS=${MODELS:-qwen3-0.6b,qwen3-8b}; TPS=${TPS:-1,2}; GEMMS=${GEMMS:-auto,cublas}
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee "$OUT/logs/versions.txt"
(for m in ${MODELS//,/ }; do
   CUDA_VISIBLE_DEVICES=1 python3 -m harness.checkpoint $m
 done > "$OUT/logs/presets.log" 2>&1) &
presets=$!
CUDA_VISIBLE_DEVICES=0 timeout --foreground ${BENCH_S:-200} python3 scripts/bench_gemv.py $([ "${SWEEP:-1}" = 1 ] && echo --sweep) \
  --out "$OUT/gemv.md" > "$OUT/logs/gemv.log" 2>&1
echo "gemv bench: exit $? at $SECONDS s"
wait $presets
echo "presets: at $SECONDS s"
for model in ${MODELS//,/ }; do
  for tp in ${TPS//,/ }; do
    for g in ${GEMMS//,/ }; do
      [ $SECONDS -gt ${TOTAL_S:-560} ] && { echo "$model tp=$tp gemm=$g: not run (time)"; continue; }
      log="$OUT/logs/ab_${model}_tp${tp}_$g.log"
      timeout --foreground ${JOB_S:-120} python3 -m harness -m model=$model tp=$tp llm.gemm=$g workload=${WORKLOADS:-latency,latency-b8} \
        llm.max_num_seqs=8 ++workload.iterations=${ITER:-5} repeat=${REPEAT:-3} device=cuda progress=false \
        results_dir="$OUT" results_file=${CSV:-gemm_ab.csv} > "$log" 2>&1
      echo "$model tp=$tp gemm=$g: exit $? at $SECONDS s, $(grep -c '^\[ok\]' "$log") ok rows"
    done
  done
done
rm -f "$OUT"/*.lock
[ -f "$OUT/gemv.md" ] && cut -d'|' -f2-11 "$OUT/gemv.md" | tail -22
