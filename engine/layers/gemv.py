"""y = x W^T for one row of x (decode at batch 1): a Triton GEMV that reads W once, at full width, in true
float32 (no TF32). CUDA machines only; ``TRITON_INTERPRET=1`` runs it on the CPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import pdl

MAX_BLOCK_K = 4096  # columns: the whole row at once up to this
TILE = 8192  # weights per program


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, y_ptr, N, K, stride_wn, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 PDL: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    col_ok = cols < N
    w_ptrs = w_ptr + cols[:, None].to(tl.int64) * stride_wn + ks[None, :]
    w = tl.load(w_ptrs, mask=col_ok[:, None] & (ks < K)[None, :], other=0.0)  # before the wait: see pdl.py
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    acc = tl.zeros((BLOCK_N,), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + k0 + ks, mask=(k0 + ks) < K, other=0.0).to(tl.float32)
        acc += tl.sum(w.to(tl.float32) * x[None, :], axis=1)
        w_ptrs += BLOCK_K
        w = tl.load(w_ptrs, mask=col_ok[:, None] & (k0 + BLOCK_K + ks < K)[None, :], other=0.0)
    tl.store(y_ptr + cols, acc.to(y_ptr.dtype.element_ty), mask=col_ok)


def tiles(n: int, k: int) -> tuple[int, int, int]:
    """The default (block_n, block_k, num_warps) of an ``[n, k]`` weight: ~``TILE`` weights per program, 2 warps
    for rows of <= 1,024 (the H200's fastest, results/h200/NOTES.md)."""
    block_k = min(triton.next_power_of_2(k), MAX_BLOCK_K)
    block_n = min(16, triton.next_power_of_2(triton.cdiv(TILE, min(k, block_k))))
    return block_n, block_k, 2 if block_k <= 1024 else 4


def gemv(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,
         block_n: int | None = None, block_k: int | None = None, num_warps: int | None = None) -> torch.Tensor:
    """x ``[1, K]``, weight ``[N, K]`` (one dtype of float16, bfloat16, float32; unit stride along K; checked by
    ``gemm.linear``) -> ``x @ weight.T`` ``[1, N]`` in x's dtype, into ``out`` when given (``[1, N]``, unit
    stride, not sharing x's storage). ``block_n`` / ``block_k`` (powers of two) / ``num_warps``: per-program
    tiles and warps (benchmarks; default ``tiles``). PDL when ``pdl.ENABLED``."""
    n, k = weight.shape
    if out is None:
        out = torch.empty(1, n, dtype=x.dtype, device=x.device)
    default_n, default_k, default_warps = tiles(n, k)
    block_n, block_k, num_warps = block_n or default_n, block_k or default_k, num_warps or default_warps
    _gemv_kernel[(triton.cdiv(n, block_n),)](x, weight, out, n, k, weight.stride(0), BLOCK_N=block_n,
                                             BLOCK_K=block_k, PDL=pdl.ENABLED, launch_pdl=pdl.ENABLED,
                                             num_warps=num_warps)
    return out
