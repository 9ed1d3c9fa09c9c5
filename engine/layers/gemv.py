"""y = x W^T for one row of x (decode at batch 1): a Triton GEMV that reads W once, at full width.

At batch 1 a linear layer moves the weight's bytes and does almost no arithmetic: its floor is
``N * K * 2 bytes / HBM bandwidth``. For the small weight shards of a tensor-parallel rank cuBLAS's GEMM
kernels are latency-bound: on the H200 (``results/h200x2/skinny_gemm_call8.md``) Qwen3-0.6B's o_proj at
tp=2 (1024 x 1024) takes 7.6 us against a 0.5 us floor, down_proj (1024 x 1536) 10.2 us. This kernel gives
each program ``BLOCK_N`` (4) output columns and walks K in ``BLOCK_K`` slices, float32 products and sums
(float32 runs compute true float32, no TF32): 2.9 and 3.5 us there. For weights above
``GEMV_MAX_WEIGHT_ELEMENTS`` cuBLAS is as fast or faster (same table: Qwen3-8B's shards, the LM head), and
at batch 8 this one-row-at-a-time form loses to cuBLAS everywhere (2-15x), so it serves batch 1 only.

Imported only on CUDA machines (Triton is not a dependency of the CPU build); ``TRITON_INTERPRET=1`` runs
it on the CPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Largest weight (elements) sent to the GEMV: 4 Mi (8 MiB in bf16). From the call-8 table: at or below it
# the GEMV wins or ties (0.6B: qkv 2048 x 1024 0.79x cuBLAS's time, 4096 x 1024 1.03x); above it cuBLAS wins
# (6144 x 1024 1.05x, 8B's o_proj 4096 x 2048 1.08x, the LM heads 1.0-2.7x).
GEMV_MAX_WEIGHT_ELEMENTS = 4 << 20
BLOCK_N = 4  # output columns per program: the best of 4-32 for every shape that wins (call-8 sweep)
MAX_BLOCK_K = 2048  # K per trip; the sweep's best was all of K up to 2048


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, y_ptr, N, K, stride_wn, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    col_ok = cols < N
    w_ptrs = w_ptr + cols[:, None].to(tl.int64) * stride_wn + ks[None, :]
    acc = tl.zeros((BLOCK_N,), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + ks) < K
        w = tl.load(w_ptrs, mask=col_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
        x = tl.load(x_ptr + k0 + ks, mask=k_ok, other=0.0).to(tl.float32)
        acc += tl.sum(w * x[None, :], axis=1)
        w_ptrs += BLOCK_K
    tl.store(y_ptr + cols, acc.to(y_ptr.dtype.element_ty), mask=col_ok)


def gemv(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,
         block_n: int = BLOCK_N, block_k: int | None = None) -> torch.Tensor:
    """x ``[1, K]`` (unit stride along K), weight ``[N, K]`` (unit stride along K) -> ``x @ weight.T``
    ``[1, N]`` in x's dtype, written into ``out`` when given (``[1, N]``, unit stride along N).
    ``block_n`` / ``block_k``: tile sizes (benchmarks); ``block_k`` defaults to K up to ``MAX_BLOCK_K``.

    Raises:
        ValueError: x is not one row, the shapes do not match, or a tensor lacks unit stride where needed.
    """
    n, k = weight.shape
    if x.dim() != 2 or x.shape[0] != 1 or x.shape[1] != k or x.stride(1) != 1 or weight.stride(1) != 1:
        raise ValueError(f"gemv: x {list(x.shape)} (stride {x.stride()}), weight {list(weight.shape)} "
                         f"(stride {weight.stride()}); needs x [1, K] and unit stride along K")
    if out is None:
        out = torch.empty(1, n, dtype=x.dtype, device=x.device)
    elif tuple(out.shape) != (1, n) or out.stride(1) != 1:
        raise ValueError(f"gemv: out {list(out.shape)} (stride {out.stride()}), expected [1, {n}]")
    block_k = block_k or min(triton.next_power_of_2(k), MAX_BLOCK_K)
    _gemv_kernel[(triton.cdiv(n, block_n),)](x, weight, out, n, k, weight.stride(0), BLOCK_N=block_n,
                                             BLOCK_K=block_k, num_warps=4)
    return out
