"""Decode attention over the paged KV cache: a Triton kernel, one program per (sequence, KV head, split), holding the
``Hq / Hkv`` query heads of its KV head (padded to 16 rows for ``tl.dot``) and walking its share of the block table
``BLOCK_N`` tokens at a time with FlashAttention's online softmax (Dao et al. 2022, algorithm 1). Split 0 takes the new
token's K/V from registers last and stores them into the cache. Split-KV (flash-decoding, Dao et al. 2023):
``num_splits`` runs per context (``decode_splits``), merged by a second kernel. With ``qk_norm`` it also applies Qwen3's
per-head RMSNorm and RoPE to q and the new k, rounding as ``fusion.qk_norm_rotary`` except that RoPE's products and sum
round once. CUDA only; ``TRITON_INTERPRET=1`` runs it on the CPU."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import decode_splits, pdl


@triton.jit
def _norm_rope(x_ptr, row_offs, row_ok, dims, w_ptr, cos_ptr, sin_ptr, eps, HEAD_DIM: tl.constexpr):
    """Rows of x (``[R, D]``, row r at ``x_ptr + row_offs[r]``, 0 where not ``row_ok``) RMS-normalised, scaled
    by w ``[D]``, rotated by RoPE at cos/sin ``[D]``, each rounded to x's dtype: float32 ``[R, D]``."""
    half = HEAD_DIM // 2
    rot = (dims + half) % HEAD_DIM
    x = tl.load(x_ptr + row_offs[:, None] + dims[None, :], mask=row_ok[:, None], other=0.0)
    xr = tl.load(x_ptr + row_offs[:, None] + rot[None, :], mask=row_ok[:, None], other=0.0).to(tl.float32)
    dt = x.dtype
    x = x.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / HEAD_DIM + eps)
    x = (tl.load(w_ptr + dims).to(tl.float32)[None, :] * (x * rstd[:, None]).to(dt).to(tl.float32)).to(dt)
    xr = (tl.load(w_ptr + rot).to(tl.float32)[None, :] * (xr * rstd[:, None]).to(dt).to(tl.float32)).to(dt)
    cos = tl.load(cos_ptr + dims).to(dt).to(tl.float32)
    sin = tl.load(sin_ptr + dims).to(dt).to(tl.float32)
    sign = tl.where(dims < half, -1.0, 1.0)
    return (x.to(tl.float32) * cos[None, :] + sign[None, :] * xr.to(tl.float32) * sin[None, :]).to(dt).to(tl.float32)


@triton.jit
def _query(q_ptr, row_offs, row_ok, dims, qw_ptr, cos_ptr, sin_ptr, eps, dtype, HEAD_DIM: tl.constexpr,
           QK_NORM: tl.constexpr):
    """The query rows ``[R, D]`` in ``dtype`` (as ``_norm_rope``'s), normalised and rotated with ``QK_NORM``."""
    if QK_NORM:
        return _norm_rope(q_ptr, row_offs, row_ok, dims, qw_ptr, cos_ptr, sin_ptr, eps, HEAD_DIM).to(dtype)
    return tl.load(q_ptr + row_offs[:, None] + dims[None, :], mask=row_ok[:, None], other=0.0)


@triton.jit
def _new_token(k_ptr, v_ptr, slot_ptr, kw_ptr, cos_ptr, sin_ptr, eps, dims, dtype, HEAD_DIM: tl.constexpr,
               QK_NORM: tl.constexpr):
    """The new token's k (normalised and rotated with ``QK_NORM``) and v ``[D]`` in ``dtype``, and its slot."""
    if QK_NORM:
        one = tl.arange(0, 1)
        k = tl.sum(_norm_rope(k_ptr, one * 0, one < 1, dims, kw_ptr, cos_ptr, sin_ptr, eps, HEAD_DIM),
                   axis=0).to(dtype)  # [1, D] -> [D]
    else:
        k = tl.load(k_ptr + dims)
    return k, tl.load(v_ptr + dims), tl.load(slot_ptr)


@triton.jit
def _step(q, k, v, m, denom, acc, scale):
    """One token (k, v ``[D]``) more of the online-softmax recurrence for the rows of q ``[R, D]``."""
    s = tl.sum(q.to(tl.float32) * k.to(tl.float32)[None, :], axis=1) * scale
    m_new = tl.maximum(m, s)
    alpha = tl.exp(m - m_new)
    p = tl.exp(s - m_new)
    return m_new, denom * alpha + p, acc * alpha[:, None] + p[:, None] * v.to(tl.float32)[None, :]


@triton.jit
def _tile(k_ptr, v_ptr, table_ptr, start, hi, stride_cb, stride_ct, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
          HEAD_DIM: tl.constexpr):
    """Cached tokens [start, start + BLOCK_N) of one sequence and KV head: k, v ``[BLOCK_N, D]`` (0 from hi)."""
    toks = tl.arange(0, BLOCK_N)
    block = tl.load(table_ptr + start // BLOCK_SIZE, mask=start < hi, other=0)
    tok_ok = start + toks < hi
    kv_offs = block.to(tl.int64) * stride_cb + ((start % BLOCK_SIZE) + toks)[:, None] * stride_ct \
        + tl.arange(0, HEAD_DIM)[None, :]
    return (tl.load(k_ptr + kv_offs, mask=tok_ok[:, None], other=0.0),
            tl.load(v_ptr + kv_offs, mask=tok_ok[:, None], other=0.0))


@triton.jit
def _accumulate(q, k, v, start, hi, m, denom, acc, scale, BLOCK_N: tl.constexpr):
    """One tile (k, v ``[BLOCK_N, D]``, tokens from ``start``, those < hi) more of ``_step``'s recurrence."""
    tok_ok = start + tl.arange(0, BLOCK_N) < hi
    s = tl.where(tok_ok[None, :], tl.dot(q, tl.trans(k)) * scale, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, axis=1))
    alpha = tl.exp(m - m_new)
    p = tl.exp(s - m_new[:, None])
    return m_new, denom * alpha + tl.sum(p, axis=1), acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)


@triton.jit
def _walk(q, k0, v0, k_ptr, v_ptr, table_ptr, lo, hi, stride_cb, stride_ct, scale, GROUP_PAD: tl.constexpr,
          HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, PRELOAD: tl.constexpr):
    """The online softmax of q ``[GROUP_PAD, D]`` over cached tokens [lo, hi) (with ``PRELOAD`` the first tile
    is k0, v0): the running max, denominator and unnormalised output."""
    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    denom = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    first = lo
    if PRELOAD:
        if lo < hi:
            m, denom, acc = _accumulate(q, k0, v0, lo, hi, m, denom, acc, scale, BLOCK_N)
        first = lo + BLOCK_N
    for start in range(first, hi, BLOCK_N):
        k, v = _tile(k_ptr, v_ptr, table_ptr, start, hi, stride_cb, stride_ct, BLOCK_SIZE, BLOCK_N, HEAD_DIM)
        m, denom, acc = _accumulate(q, k, v, start, hi, m, denom, acc, scale, BLOCK_N)
    return m, denom, acc


@triton.jit
def _paged_decode_kernel(q_ptr, k_new_ptr, v_new_ptr, k_cache_ptr, v_cache_ptr, slot_ptr, block_tables_ptr,
                         context_lens_ptr, order_ptr, out_ptr, part_ptr, lse_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, eps,
                         scale, stride_qb, stride_qh, stride_kb, stride_kh, stride_vb, stride_vh, stride_cb,
                         stride_ct, stride_ch, stride_btb, stride_ob, stride_oh, stride_rope,
                         GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                         BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr,
                         QK_NORM: tl.constexpr, ORDER: tl.constexpr, PRELOAD: tl.constexpr, PDL: tl.constexpr):
    kv_head = tl.program_id(0)  # fastest: a sequence's heads start together, in ``order``
    seq = tl.program_id(1)
    if ORDER:
        seq = tl.load(order_ptr + seq)
    split = tl.program_id(2)
    num_cached = tl.load(context_lens_ptr + seq) - 1
    chunk = tl.cdiv(tl.cdiv(num_cached, NUM_SPLITS), BLOCK_N) * BLOCK_N  # a multiple of BLOCK_N: block-aligned
    lo = split * chunk
    hi = tl.minimum(lo + chunk, num_cached)
    k_cache = k_cache_ptr + kv_head * stride_ch
    v_cache = v_cache_ptr + kv_head * stride_ch
    table = block_tables_ptr + seq * stride_btb
    # Before the wait (pdl.py): block tables and cached tokens predate the kernel before, so with PRELOAD (few
    # programs, all started during the kernel before) the first tile loads while QKV still runs; q, k, v after.
    k0, v0 = 0, 0
    if PRELOAD:
        k0, v0 = _tile(k_cache, v_cache, table, lo, hi, stride_cb, stride_ct, BLOCK_SIZE, BLOCK_N, HEAD_DIM)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    rows = tl.arange(0, GROUP_PAD)
    dims = tl.arange(0, HEAD_DIM)
    row_ok = rows < GROUP
    q_heads = kv_head * GROUP + rows
    q = _query(q_ptr + seq * stride_qb, q_heads * stride_qh, row_ok, dims, qw_ptr, cos_ptr + seq * stride_rope,
               sin_ptr + seq * stride_rope, eps, k_cache_ptr.dtype.element_ty, HEAD_DIM, QK_NORM)
    # Loaded before the walk: one memory round trip fewer on a short context's critical path.
    k_new, v_new, slot = _new_token(k_new_ptr + seq * stride_kb + kv_head * stride_kh, v_new_ptr + seq * stride_vb
                                    + kv_head * stride_vh, slot_ptr + seq, kw_ptr, cos_ptr + seq * stride_rope,
                                    sin_ptr + seq * stride_rope, eps, dims, k_cache_ptr.dtype.element_ty, HEAD_DIM,
                                    QK_NORM)
    m, denom, acc = _walk(q, k0, v0, k_cache, v_cache, table, lo, hi, stride_cb, stride_ct, scale, GROUP_PAD,
                          HEAD_DIM, BLOCK_SIZE, BLOCK_N, PRELOAD)
    if split == 0:
        m, denom, acc = _step(q, k_new, v_new, m, denom, acc, scale)  # the new token, from registers
        # Store the new token for later steps. No program reads this slot in this launch: it is past every
        # sequence's cached tokens, and a block being written is never shared (only full blocks are).
        dst = (slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_ct + kv_head * stride_ch + dims
        tl.store(k_cache_ptr + dst, k_new)
        tl.store(v_cache_ptr + dst, v_new)
    if NUM_SPLITS == 1:
        out = acc / denom[:, None]
        tl.store(out_ptr + seq * stride_ob + q_heads[:, None] * stride_oh + dims[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])
    else:  # partial output and log-sum-exp, [B, Hq, NUM_SPLITS, (D)] float32; an empty split gives 0 and -inf
        has = denom > 0
        out = tl.where(has[:, None], acc / tl.where(has, denom, 1.0)[:, None], 0.0)
        lse = tl.where(has, m + tl.log(tl.where(has, denom, 1.0)), float("-inf"))
        at = (seq * (GROUP * tl.num_programs(0)) + q_heads) * NUM_SPLITS + split
        tl.store(part_ptr + at[:, None] * HEAD_DIM + dims[None, :], out, mask=row_ok[:, None])
        tl.store(lse_ptr + at, lse, mask=row_ok)


@triton.jit
def _merge_splits_kernel(part_ptr, lse_ptr, out_ptr, stride_ob, stride_oh, NUM_SPLITS: tl.constexpr,
                         SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    seq = tl.program_id(0)
    head = tl.program_id(1)
    splits = tl.arange(0, SPLITS_PAD)
    dims = tl.arange(0, HEAD_DIM)
    at = (seq * tl.num_programs(1) + head) * NUM_SPLITS + splits
    ok = splits < NUM_SPLITS
    lse = tl.load(lse_ptr + at, mask=ok, other=float("-inf"))
    part = tl.load(part_ptr + at[:, None] * HEAD_DIM + dims[None, :], mask=ok[:, None], other=0.0)
    w = tl.exp(lse - tl.max(lse, axis=0))  # split 0 always holds the new token: the max is finite
    out = tl.sum(w[:, None] * part, axis=0) / tl.sum(w, axis=0)
    tl.store(out_ptr + seq * stride_ob + head * stride_oh + dims, out.to(out_ptr.dtype.element_ty))


def paged_decode_attention(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor, k_cache: torch.Tensor,
                           v_cache: torch.Tensor, slot_mapping: torch.Tensor, block_tables: torch.Tensor,
                           context_lens: torch.Tensor, scale: float, block_n: int | None = None,
                           num_warps: int | None = None, num_stages: int = 2, num_splits: int = 1,
                           qk_norm: tuple | None = None,
                           order: torch.Tensor | None = None, preload: bool | None = None) -> torch.Tensor:
    """One decode step of attention: q ``[B, Hq, D]``, k_new / v_new ``[B, Hkv, D]`` (last dim contiguous;
    written into the caches ``[num_blocks, block_size, Hkv, D]`` at slot_mapping ``[B]`` int64), block_tables
    ``[B, max_blocks]`` int32, context_lens ``[B]`` int32 (>= 1, the new token included) -> ``[B, Hq, D]``;
    ``scale``: the softmax scale (D^-0.5).
    ``num_splits``: programs per (sequence, KV head); ``qk_norm``: (q_weight ``[D]``, k_weight ``[D]``, eps,
    cos, sin ``[B, D]``, rows of one stride) applied to q and k_new first. ``order`` ``[B]`` int32: the sequences in the
    order their programs start (longest context first: the last wave's programs are the short ones), unused when
    they all start at once (``decode_splits.one_wave``). ``preload``: the first tile loaded before the PDL wait;
    default at batch 1 when all programs start at once: only the batch-1 GEMV before it lets them start early, and
    behind cuBLAS the early load only spills registers (call 101, results/h200/NOTES.md).
    ``block_n`` (tokens per iteration, at most the block size), ``num_warps``: default ``decode_splits.launch``;
    ``num_stages``: the H200's fastest (results/h200/NOTES.md)."""
    B, Hq, D = q.shape
    block_size, Hkv = k_cache.shape[1], k_cache.shape[2]
    group = Hq // Hkv
    default_n, default_warps = decode_splits.launch(B, num_splits, group, block_size)
    block_n, num_warps = min(block_n or default_n, block_size), num_warps or default_warps
    out = torch.empty(B, Hq, D, dtype=q.dtype, device=q.device)  # at one split also part and lse (unused)
    part = torch.empty(B, Hq, num_splits, D, dtype=torch.float32, device=q.device) if num_splits > 1 else out
    lse = torch.empty(B, Hq, num_splits, dtype=torch.float32, device=q.device) if num_splits > 1 else out
    qw, kw, eps, cos, sin = qk_norm if qk_norm is not None else (q, q, 0.0, q, q)
    one_wave = decode_splits.one_wave(B * Hkv * num_splits, q.device)
    preload = one_wave and B == 1 if preload is None else preload
    _paged_decode_kernel[(Hkv, B, num_splits)](
        q, k_new, v_new, k_cache, v_cache, slot_mapping, block_tables, context_lens,
        order if order is not None else context_lens, out, part, lse, qw, kw, cos,
        sin, eps, scale, q.stride(0), q.stride(1), k_new.stride(0), k_new.stride(1), v_new.stride(0),
        v_new.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        out.stride(0), out.stride(1), cos.stride(0), GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)),
        HEAD_DIM=D, BLOCK_SIZE=block_size, BLOCK_N=block_n, NUM_SPLITS=num_splits, QK_NORM=qk_norm is not None,
        ORDER=order is not None and not one_wave, PRELOAD=preload,
        PDL=pdl.ENABLED, launch_pdl=pdl.ENABLED, num_warps=num_warps, num_stages=num_stages)
    if num_splits > 1:
        _merge_splits_kernel[(B, Hq)](part, lse, out, out.stride(0), out.stride(1), NUM_SPLITS=num_splits,
                                      SPLITS_PAD=triton.next_power_of_2(num_splits), HEAD_DIM=D, PDL=pdl.ENABLED,
                                      launch_pdl=pdl.ENABLED, num_warps=4)
    return out
