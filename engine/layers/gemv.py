"""y = x W^T for one row of x (decode at batch 1): a Triton GEMV that reads W once, at full width.

At batch 1 the floor is ``N * K * element size / HBM bandwidth``, where cuBLAS's GEMMs are latency-bound,
the more so the smaller the weight. Each program takes ``block_n`` output rows and walks K in ``block_k``
slices, in true float32 (no TF32). Against cuBLAS on the H200 (``results/h200x2/gemv_call9.md``,
``gemv_call10.md``): 2.4-2.5x faster on Qwen3-0.6B's tp=2 shards, 0.86-0.98x its time on Qwen3-8B's shards
and the LM heads; at batch 8 a 3-D tile lost 2-15x (``skinny_gemm_call8.md``), so batch 1 only.

CUDA machines only (Triton is not a CPU dependency); ``TRITON_INTERPRET=1`` runs it on the CPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import pdl

# Tiles measured in a CUDA graph on the H200 with PDL (call 38, results/h200/session11/call38_gemv.txt; block_n 2,
# 4, 8 x block_k 512-4096 x 2, 4, 8 warps, every layer of Qwen3-0.6B and 8B at tp=1): the best loads the whole
# row at once, up to 4,096 columns, and gives each program ~8K weights, with 2 warps for rows of <= 1,024.
# That rule is the best tile or within 0.7 us of it for 9 of 10 shapes (8B's down_proj: 2 rows chosen, 4 best).
MAX_BLOCK_K = 4096
TILE = 8192  # weights per program
DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # loaded as float32; float64 would lose precision


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
    """The default (block_n, block_k, num_warps) of an ``[n, k]`` weight (see above)."""
    block_k = min(triton.next_power_of_2(k), MAX_BLOCK_K)
    block_n = min(16, triton.next_power_of_2(triton.cdiv(TILE, min(k, block_k))))
    return block_n, block_k, 2 if block_k <= 1024 else 4


def gemv(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,
         block_n: int | None = None, block_k: int | None = None, num_warps: int | None = None) -> torch.Tensor:
    """x ``[1, K]``, weight ``[N, K]`` (both unit stride along K) -> ``x @ weight.T`` ``[1, N]`` in x's dtype,
    into ``out`` when given (``[1, N]``, unit stride). ``block_n`` / ``block_k`` / ``num_warps``: per-program
    tiles and warps (benchmarks; default ``tiles``). PDL when ``pdl.ENABLED``. Raises ValueError: x is not one
    row, the shapes, dtypes (float16, bfloat16 or float32, all one) or devices do not match, a tensor lacks unit
    stride where needed, ``out`` overlaps x, or a tile size is not a power of two.
    """
    if weight.dim() != 2 or x.dim() != 2 or x.shape[0] != 1 or x.shape[1] != weight.shape[1] \
            or x.stride(1) != 1 or weight.stride(1) != 1:
        raise ValueError(f"gemv: x {list(x.shape)} (stride {x.stride()}), weight {list(weight.shape)} "
                         f"(stride {weight.stride() if weight.dim() else ()}); needs x [1, K], weight [N, K] and "
                         f"unit stride along K")
    n, k = weight.shape
    if x.dtype not in DTYPES or weight.dtype != x.dtype or weight.device != x.device:
        raise ValueError(f"gemv: x {x.dtype} on {x.device}, weight {weight.dtype} on {weight.device}; needs one "
                         f"dtype of {', '.join(str(d) for d in DTYPES)} and one device")
    if out is None:
        out = torch.empty(1, n, dtype=x.dtype, device=x.device)
    elif tuple(out.shape) != (1, n) or out.stride(1) != 1 or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(f"gemv: out {list(out.shape)} {out.dtype} (stride {out.stride()}), expected [1, {n}] "
                         f"{x.dtype} with unit stride")
    elif out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
        raise ValueError("gemv: out shares x's storage (other programs still read x)")
    default_n, default_k, default_warps = tiles(n, k)
    block_n, block_k, num_warps = block_n or default_n, block_k or default_k, num_warps or default_warps
    if any(not isinstance(b, int) or b < 1 or b & (b - 1) for b in (block_n, block_k)):
        raise ValueError(f"gemv: block_n={block_n!r}, block_k={block_k!r}: each must be a power of two")
    _gemv_kernel[(triton.cdiv(n, block_n),)](x, weight, out, n, k, weight.stride(0), BLOCK_N=block_n,
                                             BLOCK_K=block_k, PDL=pdl.ENABLED, launch_pdl=pdl.ENABLED,
                                             num_warps=num_warps)
    return out
