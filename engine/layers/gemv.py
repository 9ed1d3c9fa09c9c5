"""y = x W^T for one row of x (decode at batch 1): a Triton GEMV that reads W once, at full width, in true float32 (no
TF32). ``norm_gemv``: ``y = rms_norm(h + residual) @ W^T`` in one launch, every program walking its weight rows as the
GEMV does, summing the activation row's squares in the same pass, then scaling by ``1 / rms`` at the end
(``W (w * x / rms) = (W (w * x)) / rms``), so the weight loads never wait for the sum. Rounding: the residual sum and
gate/up as unfused; the normalised row is not rounded before the products (transformers rounds it twice): about one bf16
rounding apart. ``gemv``'s ``add`` and ``norm`` split a norm between two GEMVs instead: the one before adds the
residual and sums the new row's squares (a float atomic a program, so the sum's last bit may differ between runs), the
one after scales by ``1 / rms``, the norm's weight folded into its own. CUDA machines only; ``TRITON_INTERPRET=1`` runs
them on the CPU."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import pdl

MAX_BLOCK_K = 4096  # columns: the whole row at once up to this
TILE = 8192  # weights per program


@triton.jit
def _inv_rms(sum_sq, K, eps):
    """1 / rms of a row of K elements whose squares sum to ``sum_sq`` (RMSNorm's scale, float32)."""
    return 1.0 / tl.sqrt(sum_sq / K + eps)


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, y_ptr, res_ptr, ss_ptr, N, K, stride_wn, eps, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, ONE_TILE: tl.constexpr, PDL: tl.constexpr, ADD_RES: tl.constexpr,
                 SCALE: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    col_ok = cols < N
    w_ptrs = w_ptr + cols[:, None].to(tl.int64) * stride_wn + ks[None, :]
    w = tl.load(w_ptrs, mask=col_ok[:, None] & (ks < K)[None, :], other=0.0)  # before the wait: see pdl.py
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    # The epilogue's loads go out first: issued at the end, each would add a memory round trip to every program.
    res, rstd = 0.0, 1.0
    if ADD_RES:
        res = tl.load(res_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    if SCALE:
        rstd = _inv_rms(tl.load(ss_ptr), K, eps)
    acc = tl.zeros((BLOCK_N,), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + k0 + ks, mask=(k0 + ks) < K, other=0.0).to(tl.float32)
        w_next = w
        if not ONE_TILE:  # the next tile's load goes out before this tile's sum, whose barrier would hold it
            w_ptrs += BLOCK_K
            w_next = tl.load(w_ptrs, mask=col_ok[:, None] & (k0 + BLOCK_K + ks < K)[None, :], other=0.0)
        acc += tl.sum(w.to(tl.float32) * x[None, :], axis=1)
        w = w_next
    out_ty = y_ptr.dtype.element_ty
    if SCALE:  # x's norm, its weight folded into w: 1 / rms from the squares the GEMV before summed
        acc = acc * rstd
    y = acc.to(out_ty)
    if ADD_RES:  # the residual add, rounded as unfused; its squares summed for the next norm
        y = (y.to(tl.float32) + res).to(out_ty)
        y32 = tl.where(col_ok, y.to(tl.float32), 0.0)
        tl.atomic_add(ss_ptr, tl.sum(y32 * y32, axis=0), sem="relaxed")
    tl.store(y_ptr + cols, y, mask=col_ok)


def tiles(k: int) -> tuple[int, int, int]:
    """The default (block_n, block_k, num_warps) of a weight of rows of k: ~``TILE`` weights per program, 2 warps
    for rows of <= 1,024 (the H200's fastest, results/h200/NOTES.md), 8 for rows of several tiles (call 95, H100:
    Qwen3-8B's down_proj 35.4 -> 34.1 us at 12,288, 19.4 -> 18.7 at 6,144)."""
    block_k = min(triton.next_power_of_2(k), MAX_BLOCK_K)
    block_n = min(16, triton.next_power_of_2(triton.cdiv(TILE, min(k, block_k))))
    return block_n, block_k, 2 if block_k <= 1024 else 4 if k <= block_k else 8


def gemv(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,
         block_n: int | None = None, block_k: int | None = None, num_warps: int | None = None,
         add: tuple[torch.Tensor, torch.Tensor] | None = None,
         norm: tuple[torch.Tensor, float] | None = None) -> torch.Tensor:
    """x ``[1, K]``, weight ``[N, K]`` (one dtype of float16, bfloat16, float32; unit stride along K; checked by
    ``gemm.linear``) -> ``x @ weight.T`` ``[1, N]`` in x's dtype, into ``out`` when given (``[1, N]``, unit
    stride, not sharing x's storage). ``add`` (residual ``[1, N]``, sum_sq ``[1]`` float32): returns ``x @
    weight.T + residual`` and adds its squares to sum_sq. ``norm`` (sum_sq, eps): returns ``rms_norm(x) @
    weight.T`` for a norm folded into weight, its squares summed in sum_sq (by an ``add`` before, over K).
    ``block_n`` / ``block_k`` (powers of two) / ``num_warps``: per-program tiles and warps (benchmarks; default
    ``tiles``). PDL when ``pdl.ENABLED``."""
    n, k = weight.shape
    out = torch.empty(1, n, dtype=x.dtype, device=x.device) if out is None else out
    default_n, default_k, default_warps = tiles(k)
    block_n, block_k, num_warps = block_n or default_n, block_k or default_k, num_warps or default_warps
    res, ss = add if add is not None else (x, norm[0] if norm is not None else x)
    _gemv_kernel[(triton.cdiv(n, block_n),)](x, weight, out, res, ss, n, k, weight.stride(0),
                                             norm[1] if norm is not None else 0.0, BLOCK_N=block_n,
                                             BLOCK_K=block_k, ONE_TILE=k <= block_k, PDL=pdl.ENABLED,
                                             ADD_RES=add is not None, SCALE=norm is not None,
                                             launch_pdl=pdl.ENABLED, num_warps=num_warps)
    return out


@triton.jit
def _row(h_ptr, res_ptr, k0, ks, K, HAS_RES: tl.constexpr):
    """A slice of h (+ residual), rounded to h's dtype as the unfused add is, in float32."""
    k_ok = k0 + ks < K
    x = tl.load(h_ptr + k0 + ks, mask=k_ok, other=0.0)
    if HAS_RES:
        x = (x.to(tl.float32) + tl.load(res_ptr + k0 + ks, mask=k_ok, other=0.0).to(tl.float32)).to(x.dtype)
    return x, k_ok


@triton.jit
def _norm_gemv_kernel(h_ptr, res_ptr, res_out_ptr, norm_ptr, w_ptr, y_ptr, ss_ptr, N, K, eps, stride_wn,
                      NORM: tl.constexpr, SCALE: tl.constexpr, HAS_RES: tl.constexpr,
                      SWIGLU: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, ONE_TILE: tl.constexpr,
                      PDL: tl.constexpr):
    pid = tl.program_id(0)
    ks = tl.arange(0, BLOCK_K)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    w_ptrs = w_ptr + rows[:, None].to(tl.int64) * stride_wn + ks[None, :]
    mask = row_ok[:, None] & (ks < K)[None, :]
    # Weights' and norm's first slices before the wait (pdl.py); after it, the norm's waited behind the residual
    # store below: one more memory round trip per kernel.
    w = tl.load(w_ptrs, mask=mask, other=0.0)
    up = w
    if SWIGLU:
        up = tl.load(w_ptrs + N * stride_wn, mask=mask, other=0.0)
    nw = w
    if NORM:
        nw = tl.load(norm_ptr + ks, mask=ks < K, other=0.0).to(tl.float32)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    ss = 0.0
    if SCALE:  # first, as _gemv_kernel's epilogue loads
        ss = tl.load(ss_ptr)
    squares = tl.zeros((BLOCK_K,), tl.float32)
    acc = tl.zeros((BLOCK_N,), tl.float32)
    acc_up = tl.zeros((BLOCK_N,), tl.float32)
    for k0 in range(0, K, BLOCK_K):  # one pass: the weight loads never wait for the norm's sum
        x, k_ok = _row(h_ptr, res_ptr, k0, ks, K, HAS_RES)
        if HAS_RES and pid == 0:
            tl.store(res_out_ptr + k0 + ks, x, mask=k_ok)
        xw = x.to(tl.float32)
        if NORM:
            squares += xw * xw
            xw = xw * nw
        acc += tl.sum(w.to(tl.float32) * xw[None, :], axis=1)
        if SWIGLU:
            acc_up += tl.sum(up.to(tl.float32) * xw[None, :], axis=1)
        if not ONE_TILE:  # (a one-tile row's masked-off loads here cost ~0.1 us a kernel: call 95)
            w_ptrs += BLOCK_K
            mask = row_ok[:, None] & (k0 + BLOCK_K + ks < K)[None, :]
            w = tl.load(w_ptrs, mask=mask, other=0.0)
            if SWIGLU:
                up = tl.load(w_ptrs + N * stride_wn, mask=mask, other=0.0)
            if NORM:
                nw = tl.load(norm_ptr + k0 + BLOCK_K + ks, mask=k0 + BLOCK_K + ks < K, other=0.0).to(tl.float32)
    out_ty = y_ptr.dtype.element_ty
    if NORM or SCALE:  # SCALE: the squares summed by the GEMV before (as _gemv_kernel's)
        rstd = _inv_rms(tl.sum(squares, axis=0) if NORM else ss, K, eps)
        acc = acc * rstd
        acc_up = acc_up * rstd
    if SWIGLU:
        gate = acc.to(out_ty).to(tl.float32)
        act = (gate / (1.0 + tl.exp(-gate))).to(out_ty).to(tl.float32)
        acc = act * acc_up.to(out_ty).to(tl.float32)
    tl.store(y_ptr + rows, acc.to(out_ty), mask=row_ok)


def norm_gemv(h: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor | None, eps: float,
              weight: torch.Tensor, swiglu: bool = False, block_n: int | None = None, block_k: int | None = None,
              num_warps: int | None = None, sum_sq: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """h ``[1, K]``, residual ``[1, K]`` or None, norm_weight ``[K]`` (None: h is already normalised, residual
    None), weight ``[N, K]`` (gate then up ``[2 * I, K]`` with ``swiglu``), one dtype, unit stride along K,
    checked by ``gemm.py`` -> (``rms_norm(h + residual) @ weight.T`` ``[1, N]`` or ``silu(gate) * up`` ``[1, I]``;
    the new residual ``[1, K]``, h itself when ``residual`` is None). ``sum_sq`` (no norm_weight): as ``gemv``'s
    ``norm``. ``block_n`` (gate and up rows each with ``swiglu``: default half the GEMV's) / ``block_k`` /
    ``num_warps`` as ``gemv``'s."""
    n, k = weight.shape
    n_out = n // 2 if swiglu else n
    y = torch.empty(1, n_out, dtype=h.dtype, device=h.device)
    res_out = torch.empty_like(h) if residual is not None else h
    default_n, default_k, default_warps = tiles(k)
    block_n = block_n or max(1, default_n // 2 if swiglu else default_n)
    block_k, num_warps = block_k or default_k, num_warps or default_warps
    _norm_gemv_kernel[(triton.cdiv(n_out, block_n),)](
        h, residual if residual is not None else h, res_out, norm_weight if norm_weight is not None else h, weight, y,
        sum_sq if sum_sq is not None else h, n_out, k, eps, weight.stride(0), NORM=norm_weight is not None,
        SCALE=sum_sq is not None, HAS_RES=residual is not None, SWIGLU=swiglu,
        BLOCK_N=block_n, BLOCK_K=block_k, ONE_TILE=k <= block_k, PDL=pdl.ENABLED, launch_pdl=pdl.ENABLED,
        num_warps=num_warps)
    return y, res_out


@triton.jit
def _add_rms_norm_kernel(h_ptr, res_ptr, res_out_ptr, norm_ptr, y_ptr, K, eps, HAS_RES: tl.constexpr,
                         BLOCK_K: tl.constexpr, PDL: tl.constexpr):
    ks = tl.arange(0, BLOCK_K)
    w = tl.load(norm_ptr + ks, mask=ks < K, other=0.0).to(tl.float32)  # a constant: before the wait
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    x, k_ok = _row(h_ptr, res_ptr, 0, ks, K, HAS_RES)
    if HAS_RES:
        tl.store(res_out_ptr + ks, x, mask=k_ok)
    x32 = x.to(tl.float32)
    rstd = _inv_rms(tl.sum(x32 * x32, axis=0), K, eps)
    tl.store(y_ptr + ks, (w * (x32 * rstd).to(x.dtype).to(tl.float32)).to(x.dtype), mask=k_ok)


def add_rms_norm(h: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``fusion.add_rms_norm`` (``rms_norm`` when ``residual`` is None) of a row too long for ``norm_gemv``, in
    the GEMVs' PDL chain: h, residual ``[1, K]``, norm_weight ``[K]``, one dtype, contiguous -> (normalised
    ``[1, K]``, ``h + residual``, or h when ``residual`` is None)."""
    k = h.shape[-1]
    y = torch.empty_like(h)
    res_out = torch.empty_like(h) if residual is not None else h
    _add_rms_norm_kernel[(1,)](h, residual if residual is not None else h, res_out, norm_weight, y, k, eps,
                               HAS_RES=residual is not None, BLOCK_K=triton.next_power_of_2(k), PDL=pdl.ENABLED,
                               launch_pdl=pdl.ENABLED, num_warps=8)
    return y, res_out
