"""y = x W^T for a few rows of x (decode at small batch): a Triton kernel that reads W once, at full width.

At batch 1-8 a linear layer is a matrix-vector product: it moves the weight's bytes and does almost no
arithmetic, so its floor is ``N * K * 2 bytes / HBM bandwidth``. cuBLAS picks tile shapes made for GEMMs
(on the H200, ``nvjet_..._8x64`` at batch 1); for the matrices of a tensor-parallel shard (2-8 MB for
Qwen3-0.6B at tp=2) it runs at a few times that floor, latency-bound (``results/h200x2/NOTES.md``, the
call-1 profile). This kernel gives each program ``BLOCK_N`` output columns and all of K: it loads a
``[BLOCK_N, BLOCK_K]`` tile of W and the ``[BLOCK_M, BLOCK_K]`` slice of x, multiplies in float32 and
sums over K. Every W element is read once; x (a few KB) stays in L1/L2. Float32 products and sums, so
float32 runs compute true float32 (no TF32).

Tile sizes: :func:`pick_config`, chosen from ``scripts/bench_skinny_gemm.py`` on the H200 (see there).
Imported only on CUDA machines (Triton is not a dependency of the CPU build); ``TRITON_INTERPRET=1`` runs
it on the CPU for tests.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

MAX_M = 8  # rows of x up to which the kernel is used; larger batches are GEMMs, cuBLAS's ground


@triton.jit
def _skinny_gemm_kernel(x_ptr, w_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = tl.arange(0, BLOCK_M)
    ks = tl.arange(0, BLOCK_K)
    col_ok = cols < N
    row_ok = rows < M
    w_ptrs = w_ptr + cols[:, None].to(tl.int64) * stride_wn + ks[None, :]
    x_ptrs = x_ptr + rows[:, None] * stride_xm + ks[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + ks) < K
        w = tl.load(w_ptrs, mask=col_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
        x = tl.load(x_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
        acc += tl.sum(x[:, None, :] * w[None, :, :], axis=2)
        w_ptrs += BLOCK_K
        x_ptrs += BLOCK_K
    y_ptrs = y_ptr + rows[:, None] * stride_ym + cols[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def pick_config(m: int, n: int, k: int, num_sms: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps) for x ``[m, k]``, W ``[n, k]``.

    Enough programs to give every SM about two (``n / BLOCK_N >= 2 * num_sms`` where n allows), so each
    SM keeps several loads in flight; the register tile ``BLOCK_M * BLOCK_N * BLOCK_K`` at most 8,192
    float32 (64 per thread at 4 warps); K in as few trips as that allows.
    """
    block_m = triton.next_power_of_2(max(1, m))
    block_n = 64
    while block_n > 4 and triton.cdiv(n, block_n) < 2 * num_sms:
        block_n //= 2
    block_k = min(triton.next_power_of_2(k), max(32, 8192 // (block_m * block_n)))
    return block_m, block_n, block_k, 4


@functools.lru_cache(maxsize=None)
def _num_sms(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 132


def skinny_linear(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,
                  config: tuple[int, int, int, int] | None = None) -> torch.Tensor:
    """x ``[M, K]`` (M <= MAX_M, row stride free, unit column stride), weight ``[N, K]`` contiguous ->
    ``x @ weight.T`` ``[M, N]`` in x's dtype, written into ``out`` when given (``[M, N]``, unit column stride).

    ``config``: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps) to override :func:`pick_config` (benchmarks).
    Raises:
        ValueError: shapes that do not match, M > MAX_M, or a tensor without unit stride along K / N.
    """
    m, k = x.shape
    n = weight.shape[0]
    if weight.shape[1] != k or m > MAX_M or x.stride(1) != 1 or weight.stride(1) != 1:
        raise ValueError(f"skinny_linear: x {list(x.shape)} (stride {x.stride()}), weight {list(weight.shape)} "
                         f"(stride {weight.stride()}); needs M <= {MAX_M} and unit stride along K")
    if out is None:
        out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    elif tuple(out.shape) != (m, n) or out.stride(1) != 1:
        raise ValueError(f"skinny_linear: out {list(out.shape)} (stride {out.stride()}), expected [{m}, {n}]")
    if config is None:
        config = pick_config(m, n, k, _num_sms(x.device))
    block_m, block_n, block_k, warps = config
    _skinny_gemm_kernel[(triton.cdiv(n, block_n),)](x, weight, out, m, n, k, x.stride(0), weight.stride(0),
                                                    out.stride(0), BLOCK_M=block_m, BLOCK_N=block_n,
                                                    BLOCK_K=block_k, num_warps=warps)
    return out
