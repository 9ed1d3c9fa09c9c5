# The device-machine preamble, sourced (not run) from the repository root by every device script:
#   source scripts/device_env.sh
# Installs the carried wheels (.whl/*.whl) once into /tmp/site where a GPU is, exports PYTHONPATH (/tmp/site and the
# checkout), PYTHONUNBUFFERED, TPCP_CACHE (the model cache) and TPCP_GIT_COMMIT (from .commit), and creates
# $OUT (default /tmp/out), where every script writes its CSVs and logs. NVLink multicast stays off
# (KINDS.md: a program using it can take the host's shared GPUs out of service). Defines ``require_gpus N``
# (one line and exit 2 without N CUDA GPUs). Ctrl-C or TERM ends the script, not only the step it is in: the
# steps run under `timeout --foreground`, so the terminal's signal reaches them and each stops its own ranks
# (plain `timeout` puts its step in a process group of its own, which Ctrl-C does not reach).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# the wheels are for the device machine's Python: elsewhere (no GPU) require_gpus refuses first
if ls .whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site ] && nvidia-smi -L >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TPCP_CACHE=/tmp/tpcp-cache
export TPCP_GIT_COMMIT=${TPCP_GIT_COMMIT:-$(cat .commit 2>/dev/null)}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# A step that a signal stopped exits 128 + its number (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP) and bash goes on (it
# waited for the step): ERR (set -E: in functions and subshells too) ends the script there with that code;
# INT/TERM between steps ends it directly. The trap keeps its code in a name of its own: it runs after every failed
# command (a grep finding nothing too), and a script's own `rc` would be overwritten.
set -E
trap '_err_rc=$?; case $_err_rc in 129|130|143) [ $BASH_SUBSHELL -eq 0 ] && echo "error: interrupted" >&2; exit $_err_rc;; esac' ERR
trap '[ $BASH_SUBSHELL -eq 0 ] && echo "error: interrupted" >&2; exit 130' INT TERM
require_gpus() {  # N: unless this machine has N CUDA GPUs, one line on stderr and exit 2, before any step
  local n
  n=$(python3 -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)" 2>/dev/null)
  if [ "${n:-0}" -lt "$1" ]; then
    echo "error: $(basename "$0") needs $1 CUDA GPU(s) and this machine has ${n:-0} (run it on the device machine)" >&2
    exit 2
  fi
}
check_overrides() {  # OVERRIDES...: the harness composes and checks one job of them (--cfg job runs none): on bad
  # input its one line on stderr and exit 2, before any step. Give the workload the script runs: keys differ by kind.
  python3 -m harness --cfg job "$@" > /dev/null || exit 2
}
in_tree() {  # TREE CMD...: CMD run in TREE (a .base, an old copy) on TREE's code and commit. PYTHONPATH above names
  # this checkout, so a plain `cd .base && python3 ...` imports this tree's engine (session 44's call 116 did).
  (cd "$1" && shift && PYTHONPATH=/tmp/site:$PWD TPCP_GIT_COMMIT=$(cat .commit 2>/dev/null || echo "$TPCP_GIT_COMMIT") \
    "$@")
}
