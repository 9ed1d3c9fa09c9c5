#!/usr/bin/env bash
# Simulated nodes on one host: each node is torchrun in namespaces of its own (unshare --uts --ipc --mount:
# its own host name and a private /dev/shm, so one node cannot see the other's shared memory; the network is
# shared, so MASTER_ADDR is loopback). The same entry point as on real machines.
#   NODES=2 NPROC=1 PORT=29600 bash scripts/sim_nodes.sh -m harness control=zmq tp=2 workload=smoke
#   NODES=2 NPROC=1 PORT=29600 bash scripts/sim_nodes.sh path/to/script.py args...
# torchrun runs under $PYTHON (default python3: an activated venv's). Exit code: the worst node's. Node k's output
# goes to $LOGDIR/sim_node<k>.log (default: a new directory /tmp/sim_nodes.XXXXXX, so two runs never write one
# file) and is printed after, also when interrupted; torchrun's own log folders go there too (else each run leaves
# a /tmp/torchelastic_* behind).
set -u
[ $# -gt 0 ] || { echo "usage: [NODES=2 NPROC=1 PORT=29600] bash scripts/sim_nodes.sh -m harness OVERRIDES... | SCRIPT.py ARGS..." >&2; exit 2; }
NODES=${NODES:-2}; NPROC=${NPROC:-1}; PORT=${PORT:-29600}; LOGDIR=${LOGDIR:-$(mktemp -d /tmp/sim_nodes.XXXXXX)}
mkdir -p "$LOGDIR" || exit 2
args=$(printf '%q ' "$@")
# Gloo and NCCL over loopback sockets, one host id per node (NCCL then uses its network transport, not the
# shared-memory or peer-to-peer paths of one host), no InfiniBand, never NVLink multicast.
export GLOO_SOCKET_IFNAME=lo NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_NVLS_ENABLE=0 \
  TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
pids=()
show_logs() {
  for ((k = 0; k < NODES; k++)); do
    echo "== node $k ($LOGDIR/sim_node$k.log) =="; grep -v "^W[0-9]\{4\}\|\*\*\*\*\|OMP_NUM_THREADS" "$LOGDIR/sim_node$k.log"
  done
}
# Ctrl-C or TERM: each node's torchrun gets TERM and stops its ranks (this script would otherwise leave them);
# the exit code is 128 + the signal's number, as the harness's.
stop() { kill "${pids[@]}" 2>/dev/null; wait; show_logs; echo "error: interrupted" >&2; exit "$1"; }
trap 'stop 130' INT
trap 'stop 143' TERM
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
for ((k = 0; k < NODES; k++)); do
  if [ "$GPUS" -ge $((NODES * NPROC)) ]; then  # node k gets GPUs k*NPROC .. (k+1)*NPROC-1, as a real node its own
    export CUDA_VISIBLE_DEVICES=$(seq -s, $((k * NPROC)) $(((k + 1) * NPROC - 1)))
  fi
  NCCL_HOSTID=sim-node$k unshare --uts --ipc --mount --propagation private sh -c "mount -t tmpfs -o size=1g tmpfs /dev/shm && \
    hostname sim-node$k && exec ${PYTHON:-python3} -m torch.distributed.run --nnodes=$NODES --nproc-per-node=$NPROC --node-rank=$k \
    --master-addr=127.0.0.1 --master-port=$PORT --max-restarts=0 --log-dir=$(printf %q "$LOGDIR/torchrun-node$k") $args" > "$LOGDIR/sim_node$k.log" 2>&1 &
  pids+=($!)
done
code=0
for pid in "${pids[@]}"; do wait "$pid"; c=$?; [ $c -gt $code ] && code=$c; done
show_logs
exit $code
