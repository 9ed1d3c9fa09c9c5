"""Decode attention over the paged KV cache: a Triton kernel, one program per (sequence, KV head).

Each program keeps the ``Hq / Hkv`` query heads that share its KV head (grouped-query attention) in one
tile, walks the sequence's block table ``BLOCK_N`` tokens at a time and accumulates softmax(q k^T) v with
the online-softmax recurrence of FlashAttention (Dao et al. 2022, algorithm 1), so K and V are read from
device memory exactly once. The new token's K/V come in registers (one last step of the recurrence) and are
stored into the cache by the same program: no separate cache-write kernels per layer. The query-head group
is padded to 16 rows for ``tl.dot``. Memory-bound: the cost is the bytes of K and V of every context token,
(2 * Hkv * head_dim * 2 bytes per token per layer).

Imported only on CUDA machines (Triton is not a dependency of the CPU build).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _paged_decode_kernel(q_ptr, k_new_ptr, v_new_ptr, k_cache_ptr, v_cache_ptr, slot_ptr, block_tables_ptr,
                         context_lens_ptr, out_ptr, scale, stride_qb, stride_qh, stride_kb, stride_kh, stride_vb,
                         stride_vh, stride_cb, stride_ct, stride_ch, stride_btb, stride_ob, stride_oh,
                         GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                         BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    num_cached = tl.load(context_lens_ptr + seq) - 1
    rows = tl.arange(0, GROUP_PAD)
    dims = tl.arange(0, HEAD_DIM)
    toks = tl.arange(0, BLOCK_N)
    row_ok = rows < GROUP
    q_heads = kv_head * GROUP + rows
    q = tl.load(q_ptr + seq * stride_qb + q_heads[:, None] * stride_qh + dims[None, :], mask=row_ok[:, None], other=0.0)
    m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    denom = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)
    for start in range(0, num_cached, BLOCK_N):
        block = tl.load(block_tables_ptr + seq * stride_btb + start // BLOCK_SIZE)
        offs = (start % BLOCK_SIZE) + toks
        tok_ok = start + toks < num_cached
        base = block.to(tl.int64) * stride_cb + kv_head * stride_ch
        kv_offs = base + offs[:, None] * stride_ct + dims[None, :]
        k = tl.load(k_cache_ptr + kv_offs, mask=tok_ok[:, None], other=0.0)
        v = tl.load(v_cache_ptr + kv_offs, mask=tok_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(tok_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        denom = denom * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    # The new token, from registers: one more step of the same recurrence.
    k_new = tl.load(k_new_ptr + seq * stride_kb + kv_head * stride_kh + dims)
    v_new = tl.load(v_new_ptr + seq * stride_vb + kv_head * stride_vh + dims)
    s_new = tl.sum(q.to(tl.float32) * k_new.to(tl.float32)[None, :], axis=1) * scale
    m_new = tl.maximum(m, s_new)
    alpha = tl.exp(m - m_new)
    p = tl.exp(s_new - m_new)
    denom = denom * alpha + p
    acc = acc * alpha[:, None] + p[:, None] * v_new.to(tl.float32)[None, :]
    out = acc / denom[:, None]
    tl.store(out_ptr + seq * stride_ob + q_heads[:, None] * stride_oh + dims[None, :], out.to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None])
    # Store the new token for later steps. No program reads this slot in this launch: it is past every
    # sequence's cached tokens, and a block being written is never shared (only full blocks are).
    slot = tl.load(slot_ptr + seq)
    dst = (slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_ct + kv_head * stride_ch + dims
    tl.store(k_cache_ptr + dst, k_new)
    tl.store(v_cache_ptr + dst, v_new)


def paged_decode_attention(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor, k_cache: torch.Tensor,
                           v_cache: torch.Tensor, slot_mapping: torch.Tensor, block_tables: torch.Tensor,
                           context_lens: torch.Tensor, scale: float, block_n: int = 64, num_warps: int = 2,
                           num_stages: int = 2) -> torch.Tensor:
    """One decode step of attention, the new token's K/V store included.

    q ``[B, Hq, D]``, k_new / v_new ``[B, Hkv, D]`` (the new token's; last dim contiguous); caches
    ``[num_blocks, block_size, Hkv, D]``; slot_mapping ``[B]`` int64 (the new token's cache slot);
    block_tables ``[B, max_blocks]`` int32; context_lens ``[B]`` int32 (tokens, >= 1, the new one
    included) -> ``[B, Hq, D]``; k_new / v_new are written into the caches at their slots.
    ``block_n`` (tokens per iteration, capped at the block size), ``num_warps``, ``num_stages``: launch
    tuning (scripts/bench_decode_kernel.py; 64 / 2 / 2 measured fastest on the H200 at the 8B shapes with
    ~1,000 programs, results/h200/session6/; 32 and 64 tie where programs are many).
    """
    B, Hq, D = q.shape
    block_size, Hkv = k_cache.shape[1], k_cache.shape[2]
    group = Hq // Hkv
    block_n = min(block_n, block_size)
    out = torch.empty_like(q)
    _paged_decode_kernel[(B, Hkv)](
        q, k_new, v_new, k_cache, v_cache, slot_mapping, block_tables, context_lens, out, scale,
        q.stride(0), q.stride(1), k_new.stride(0), k_new.stride(1), v_new.stride(0), v_new.stride(1),
        k_cache.stride(0), k_cache.stride(1),
        k_cache.stride(2), block_tables.stride(0), out.stride(0), out.stride(1),
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=D, BLOCK_SIZE=block_size,
        BLOCK_N=block_n, num_warps=num_warps, num_stages=num_stages)
    return out
