# The device-machine preamble, sourced (not run) from the repository root by every device script:
#   source scripts/device_env.sh
# Installs the carried wheels (.whl/*.whl) once into /tmp/site, exports PYTHONPATH (/tmp/site and the
# checkout), PYTHONUNBUFFERED, TPCP_CACHE (the model cache) and TPCP_GIT_COMMIT (from .commit), and creates
# $OUT (default /tmp/out), where every script writes its CSVs and logs. NVLink multicast stays off
# (KINDS.md: a program using it can take the host's shared GPUs out of service).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if ls .whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TPCP_CACHE=/tmp/tpcp-cache
export TPCP_GIT_COMMIT=${TPCP_GIT_COMMIT:-$(cat .commit 2>/dev/null)}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
