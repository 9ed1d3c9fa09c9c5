"""Attention over the paged KV cache (slot = block_id * block_size + offset): CUDA decode through ``paged_decode``'s
Triton kernel (which also stores the new K/V); CUDA prefill without cached prefix through varlen flash attention
(float32 or torch < 2.10: SDPA per sequence); else (CPU, prefix-cache hits) SDPA over queries padded to ``[B, Lq_max]``
and gathered contexts ``[B, Lk_max]``, key j allowed for query i when j <= position(i) and j < context length."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel


@dataclass
class AttentionMetadata:
    """Per-step inputs shared by every attention layer."""

    slot_mapping: torch.Tensor  # [N] int64, cache slot of each new token
    block_tables: torch.Tensor  # [B, max_blocks] int64 (int32 for CUDA decode), padded with 0 (masked out)
    q_pad_index: torch.Tensor | None  # [N] int64, where each new token sits in the padded [B * Lq_max] queries
    mask: torch.Tensor | None  # [B, 1, Lq_max, Lk_max] bool, True = may attend
    num_seqs: int  # B
    max_q_len: int  # Lq_max
    max_k_len: int  # Lk_max
    context_lens: torch.Tensor | None = None  # [B] int32: set for CUDA decode (the Triton kernel's path)
    num_splits: int | None = None  # CUDA decode: programs per (sequence, KV head) (decode_splits)
    decode_order: torch.Tensor | None = None  # [B] int32, CUDA decode: the sequences, longest context first
    prefill_spans: list[tuple[int, int]] | None = None  # CUDA prefill without cached prefix: [start, end) of each
    cu_seqlens: torch.Tensor | None = None  # the same as [B + 1] int32 offsets, for the varlen flash kernel


class Attention(nn.Module):
    """Multi-head attention with grouped KV heads over the paged cache; ``k_cache`` / ``v_cache``
    ``[num_blocks, block_size, num_kv_heads, head_dim]`` are set by the model runner."""

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scale: float):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim, self.scale = num_heads, num_kv_heads, head_dim, scale
        self.k_cache = self.v_cache = torch.empty(0)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata,
                qk_norm: tuple | None = None) -> torch.Tensor:
        """q ``[N, Hq, D]``, k/v ``[N, Hkv, D]`` -> ``[N, Hq, D]``. ``qk_norm`` (CUDA decode only): the
        (q_weight, k_weight, eps, cos, sin) that the decode kernel applies to q and k first."""
        if meta.context_lens is not None:
            from .paged_decode import paged_decode_attention  # Triton: CUDA machines only

            return paged_decode_attention(q, k, v, self.k_cache, self.v_cache, meta.slot_mapping, meta.block_tables,
                                          meta.context_lens, self.scale, num_splits=meta.num_splits or 1,
                                          qk_norm=qk_norm, order=meta.decode_order)
        self.k_cache.view(-1, *k.shape[1:]).index_copy_(0, meta.slot_mapping, k)  # store the new K/V
        self.v_cache.view(-1, *v.shape[1:]).index_copy_(0, meta.slot_mapping, v)
        if meta.prefill_spans is not None:
            if q.dtype in (torch.float16, torch.bfloat16) and (varlen := varlen_causal()) is not None:
                return varlen(q, k, v, meta.cu_seqlens, meta.max_q_len, self.scale)
            return self._prefill_per_sequence(q, k, v, meta.prefill_spans)
        B, Lq, Lk, D = meta.num_seqs, meta.max_q_len, meta.max_k_len, self.head_dim
        qp = q.new_zeros(B * Lq, self.num_heads, D)
        qp[meta.q_pad_index] = q
        qp = qp.view(B, Lq, self.num_heads, D).transpose(1, 2)
        kp, vp = (gather_context(cache, meta.block_tables, Lk) for cache in (self.k_cache, self.v_cache))
        out = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=meta.mask, scale=self.scale,
                                             enable_gqa=self.num_heads != self.num_kv_heads)
        return out.transpose(1, 2).reshape(B * Lq, self.num_heads, D)[meta.q_pad_index]

    def _prefill_per_sequence(self, q, k, v, spans) -> torch.Tensor:
        """CUDA prefill without varlen flash (float32, or torch < 2.10): one causal SDPA call per sequence [s, e) of
        ``spans``. K/V heads are repeated for grouped queries (on the H200 ``enable_gqa`` took a slow path)."""
        group = self.num_heads // self.num_kv_heads
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        q, k, v = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))  # [1, H, N, D]
        # Not cuDNN: it builds a plan per new sequence length (~7 s over the bench's prompt lengths on the H200).
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            out = [F.scaled_dot_product_attention(q[:, :, s:e], k[:, :, s:e], v[:, :, s:e], is_causal=True,
                                                  scale=self.scale) for s, e in spans]
        return torch.cat([o[0].transpose(0, 1) for o in out])


def gather_context(cache: torch.Tensor, block_tables: torch.Tensor, max_len: int) -> torch.Tensor:
    """cache ``[num_blocks, bs, H, D]``, block_tables ``[B, nb]`` -> ``[B, H, max_len, D]``."""
    return cache[block_tables].flatten(1, 2)[:, :max_len].transpose(1, 2)


@functools.cache
def varlen_causal():
    """Causal prefill of a whole batch in one flash-attention call, grouped K/V heads read in place, as ``f(q [N, Hq,
    D], k/v [N, Hkv, D] (bf16/fp16, CUDA), cu_seqlens [B + 1] int32 offsets of each sequence in N, max_len (the
    longest), scale) -> [N, Hq, D]``; None before torch 2.10 (one SDPA call per sequence instead). Imported at first
    use: ``torch.nn.attention.varlen`` imports torch._dynamo, 1.6 s of every process's start on a 2-core CPU."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters
    # torch 2.10 spells causality is_causal; later releases a (left, right) window, (-1, 0) being causal.
    kwargs = {"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True}
    if "enable_gqa" in params:
        kwargs["enable_gqa"] = True
    return lambda q, k, v, cu_seqlens, max_len, scale: varlen_attn(q, k, v, cu_seqlens, cu_seqlens, max_len, max_len,
                                                                   scale=scale, **kwargs)
