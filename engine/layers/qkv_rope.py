"""QKV at batch 1 with Qwen3's q/k norm and RoPE split off the decode kernel (not in the engine yet: measured first
by ``scripts/norm_chain.py --context``). A batch-1 GEMV (``gemv.py``'s ``norm=`` mode: x's norm folded into W,
1 / rms from the squares the GEMV before summed) whose programs over a q or k head each hold rotation pairs, rows d
and d + D/2, as two half tiles. Its epilogue rounds the projection as q_proj's output, adds the pairs' squares into
the head's float32 slot (one float atomic a program), and stores ``rope(g * x)``. RMSNorm's ``1 / rms`` is one scalar
per head, which commutes with RoPE, so the decode kernel (``paged_decode_attention(qk_scale=)``) only multiplies q's
rows and k by it. Rounding: one bf16 rounding of ``rope(g * x)`` and one of its product by 1 / rms, where
transformers rounds after the norm, the weight and each RoPE operation. CUDA only; ``TRITON_INTERPRET=1`` runs it
on the CPU."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import pdl
from .gemv import MAX_BLOCK_K, _inv_rms, tiles


@triton.jit
def _qkv_rope_kernel(x_ptr, w_ptr, y_ptr, ss_ptr, head_ss_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, K, stride_wn, eps,
                     NQ: tl.constexpr, NQK: tl.constexpr, HEAD_DIM: tl.constexpr, HALF_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, PDL: tl.constexpr):
    pid = tl.program_id(0)
    per_head: tl.constexpr = HEAD_DIM // 2 // HALF_N
    pair = pid < NQK * per_head  # a q or k head's program; else v's rows, 2 * HALF_N in a row
    head = pid // per_head
    dims = (pid % per_head) * HALF_N + tl.arange(0, HALF_N)  # this program's first half of each rotation pair
    lo = tl.where(pair, head * HEAD_DIM + dims, NQK * HEAD_DIM + (pid - NQK * per_head) * 2 * HALF_N
                  + tl.arange(0, HALF_N))
    hi = lo + tl.where(pair, HEAD_DIM // 2, HALF_N)
    ks = tl.arange(0, BLOCK_K)
    k_ok = (ks < K)[None, :]
    w_lo = tl.load(w_ptr + lo[:, None].to(tl.int64) * stride_wn + ks[None, :], mask=k_ok, other=0.0)
    w_hi = tl.load(w_ptr + hi[:, None].to(tl.int64) * stride_wn + ks[None, :], mask=k_ok, other=0.0)
    is_q = head < NQ  # the norms' weights are constants: before the wait (pdl.py)
    g_lo = tl.where(is_q, tl.load(qw_ptr + dims), tl.load(kw_ptr + dims)).to(tl.float32)
    g_hi = tl.where(is_q, tl.load(qw_ptr + dims + HEAD_DIM // 2), tl.load(kw_ptr + dims + HEAD_DIM // 2)).to(tl.float32)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    out_ty = y_ptr.dtype.element_ty
    # cos/sin (a step input) rounded to the model's dtype, as transformers; "rotate half" repeats them in each half
    c = tl.load(cos_ptr + dims).to(out_ty).to(tl.float32)
    s = tl.load(sin_ptr + dims).to(out_ty).to(tl.float32)
    rstd = _inv_rms(tl.load(ss_ptr), K, eps)
    x = tl.load(x_ptr + ks, mask=ks < K, other=0.0).to(tl.float32)
    x_lo = (tl.sum(w_lo.to(tl.float32) * x[None, :], axis=1) * rstd).to(out_ty).to(tl.float32)  # as q_proj's
    x_hi = (tl.sum(w_hi.to(tl.float32) * x[None, :], axis=1) * rstd).to(out_ty).to(tl.float32)
    tl.atomic_add(head_ss_ptr + head, tl.sum(x_lo * x_lo + x_hi * x_hi, axis=0), mask=pair, sem="relaxed")
    t_lo, t_hi = g_lo * x_lo, g_hi * x_hi
    tl.store(y_ptr + lo, tl.where(pair, t_lo * c - t_hi * s, x_lo).to(out_ty))
    tl.store(y_ptr + hi, tl.where(pair, t_hi * c + t_lo * s, x_hi).to(out_ty))


def qkv_rope(x: torch.Tensor, weight: torch.Tensor, sum_sq: torch.Tensor, eps: float, head_ss: torch.Tensor,
             q_weight: torch.Tensor, k_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
             num_q_heads: int, num_kv_heads: int) -> torch.Tensor:
    """x ``[1, K]`` (K <= ``gemv.MAX_BLOCK_K``), weight ``[(Hq + 2 Hkv) * D, K]`` with x's norm folded in,
    sum_sq float32 ``[1]`` (x's squares, summed by the GEMV before), head_ss float32 ``[Hq + Hkv]`` (zero; gets
    each q and k head's squares), q_weight / k_weight ``[D]`` (q_norm's, k_norm's), cos / sin ``[D]`` float32 (this
    token's position; each half the same, RoPE's "rotate half") -> ``[1, (Hq + 2 Hkv) * D]``: q and k as
    ``rope(g * x)`` without their 1 / rms, v as the projection. One dtype of float16, bfloat16, float32; unit stride
    along K. PDL when ``pdl.ENABLED``. Raises ValueError: K > ``gemv.MAX_BLOCK_K`` (one tile holds x's row)."""
    n, k = weight.shape
    if k > MAX_BLOCK_K:
        raise ValueError(f"qkv_rope: rows of at most {MAX_BLOCK_K} columns, got {k}")
    D = n // (num_q_heads + 2 * num_kv_heads)
    block_n, block_k, num_warps = tiles(n, k)
    half = max(1, block_n // 2)
    out = torch.empty(1, n, dtype=x.dtype, device=x.device)
    _qkv_rope_kernel[(n // (2 * half),)](x, weight, out, sum_sq, head_ss, q_weight, k_weight, cos, sin, k,
                                         weight.stride(0), eps, NQ=num_q_heads, NQK=num_q_heads + num_kv_heads,
                                         HEAD_DIM=D, HALF_N=half, BLOCK_K=block_k, PDL=pdl.ENABLED,
                                         launch_pdl=pdl.ENABLED, num_warps=num_warps)
    return out
