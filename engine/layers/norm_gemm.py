"""y = rms_norm(h + residual) @ W^T for a decode batch of M rows (2 <= M <= ``MAX_M``): a Triton GEMM with the
residual add, the RMSNorm and (gate/up) SiLU-and-mul fused, launched in the PDL chain (``pdl.py``), so a layer at batch
M runs 4 GEMM kernels and its attention, where cuBLAS needs 4 GEMMs, 2 norm kernels and a SiLU-and-mul, none of them
overlapping. The norm is folded in as ``norm_gemv`` does it: each program sums its rows' squares as it walks K and
scales by ``1 / rms`` at the end (``W (w * x / rms) = (W (w * x)) / rms``); ``w * x`` is rounded to W's dtype before
the ``tl.dot``, one bf16 rounding from transformers' order. Float32 runs the dot in IEEE float32 (no TF32), as cuBLAS
does by default. CUDA only; ``TRITON_INTERPRET=1`` runs it on the CPU (float32)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import pdl

MAX_M = 256  # rows: past this (prefill) cuBLAS


@triton.jit
def _norm_gemm_kernel(h_ptr, res_ptr, res_out_ptr, norm_ptr, w_ptr, y_ptr, M, N, K, eps, stride_hm, stride_wn,
                      stride_ym, NORM: tl.constexpr, HAS_RES: tl.constexpr, SWIGLU: tl.constexpr,
                      PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      PDL: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)  # M fastest: the programs of one weight tile run together
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok, col_ok = rows < M, cols < N
    w_ptrs = w_ptr + cols[:, None].to(tl.int64) * stride_wn + ks[None, :]
    h_offs = rows[:, None] * stride_hm + ks[None, :]
    if PDL:  # launched beside the previous kernel's tail; nothing read before its end
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    squares = tl.zeros((BLOCK_M,), tl.float32)
    for k0 in range(0, K, BLOCK_K):  # loads inside the loop: Triton pipelines them through shared memory
        k_ok = (k0 + ks < K)[None, :]
        x = tl.load(h_ptr + h_offs + k0, mask=row_ok[:, None] & k_ok, other=0.0)
        w = tl.load(w_ptrs + k0, mask=col_ok[:, None] & k_ok, other=0.0)
        if HAS_RES:  # the sum rounded to h's dtype, as the unfused add
            r = tl.load(res_ptr + h_offs + k0, mask=row_ok[:, None] & k_ok, other=0.0)
            x = (x.to(tl.float32) + r.to(tl.float32)).to(x.dtype)
            if pid_n == 0:
                tl.store(res_out_ptr + h_offs + k0, x, mask=row_ok[:, None] & k_ok)
        if NORM:
            xf = x.to(tl.float32)
            squares += tl.sum(xf * xf, axis=1)
            nw = tl.load(norm_ptr + k0 + ks, mask=k0 + ks < K, other=0.0).to(tl.float32)
            x = (xf * nw[None, :]).to(w.dtype)
        acc = tl.dot(x, tl.trans(w), acc, input_precision=PRECISION)
        if SWIGLU:
            up = tl.load(w_ptrs + N * stride_wn + k0, mask=col_ok[:, None] & k_ok, other=0.0)
            acc_up = tl.dot(x, tl.trans(up), acc_up, input_precision=PRECISION)
    out_ty = y_ptr.dtype.element_ty
    if NORM:
        rstd = 1.0 / tl.sqrt(squares / K + eps)
        acc = acc * rstd[:, None]
        acc_up = acc_up * rstd[:, None]
    if SWIGLU:  # rounded where the unfused path rounds: gate/up, then silu(gate)
        gate = acc.to(out_ty).to(tl.float32)
        acc = (gate / (1.0 + tl.exp(-gate))).to(out_ty).to(tl.float32) * acc_up.to(out_ty).to(tl.float32)
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], acc.to(out_ty), mask=row_ok[:, None] & col_ok[None, :])


def tiles(m: int, n: int, k: int, sms: int = 132) -> tuple[int, int, int, int, int]:
    """The default (block_m, block_n, block_k, num_warps, num_stages) for ``[m, k] @ [n, k].T``: every row tile of up
    to 64 rows, and the widest column tile of 128 down to 16 that still gives ``sms`` programs (an H200 has 132 SMs)."""
    block_m = min(64, max(16, triton.next_power_of_2(m)))
    block_n = next((b for b in (128, 64, 32) if triton.cdiv(m, block_m) * triton.cdiv(n, b) >= sms), 16)
    return block_m, block_n, min(128, triton.next_power_of_2(k)), 4, 3


def norm_gemm(h: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor | None, eps: float,
              weight: torch.Tensor, swiglu: bool = False, out: torch.Tensor | None = None,
              tile: tuple[int, int, int, int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """h ``[M, K]``, residual ``[M, K]`` or None, norm_weight ``[K]`` (None: no norm; then residual None too), weight
    ``[N, K]`` (gate then up ``[2 * I, K]`` with ``swiglu``); one dtype, unit stride along K -> (``rms_norm(h +
    residual) @ weight.T`` ``[M, N]``, or ``silu(gate) * up`` ``[M, I]``; the new residual ``[M, K]``, h itself when
    ``residual`` is None). ``out``: the result's storage (unit stride along N). ``tile``: (block_m, block_n, block_k,
    num_warps, num_stages), default ``tiles``. PDL when ``pdl.ENABLED``."""
    (m, k), n = h.shape, weight.shape[0]
    n_out = n // 2 if swiglu else n
    y = torch.empty(m, n_out, dtype=h.dtype, device=h.device) if out is None else out
    res_out = torch.empty_like(h) if residual is not None else h
    bm, bn, bk, warps, stages = tile or tiles(m, n_out, k)
    grid = (triton.cdiv(m, bm), triton.cdiv(n_out, bn))
    _norm_gemm_kernel[grid](
        h, residual if residual is not None else h, res_out, norm_weight if norm_weight is not None else h, weight, y,
        m, n_out, k, eps, h.stride(0), weight.stride(0), y.stride(0), NORM=norm_weight is not None,
        HAS_RES=residual is not None, SWIGLU=swiglu, PRECISION="ieee" if h.dtype == torch.float32 else "tf32",
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, PDL=pdl.ENABLED, launch_pdl=pdl.ENABLED, num_warps=warps,
        num_stages=stages)
    return y, res_out
