"""Causal prefill attention over a whole batch of variable-length sequences in one flash-attention call
(torch.nn.attention.varlen, torch >= 2.10), without padding and with grouped K/V heads read in place."""

from __future__ import annotations

import inspect

import torch

try:
    from torch.nn.attention.varlen import varlen_attn
except ImportError:  # torch < 2.10: the caller falls back to one SDPA call per sequence
    varlen_attn = None


def _causal_kwargs() -> dict:
    params = inspect.signature(varlen_attn).parameters
    # torch 2.10 spells causality is_causal; later releases a (left, right) window, (-1, 0) being causal.
    kwargs = {"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True}
    if "enable_gqa" in params:
        kwargs["enable_gqa"] = True
    return kwargs


def _varlen_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, max_len: int,
                   scale: float) -> torch.Tensor:
    """q ``[N, Hq, D]``, k/v ``[N, Hkv, D]`` (bf16/fp16, CUDA; Hkv divides Hq), ``cu_seqlens`` ``[B + 1]``
    int32 offsets of each sequence in N, ``max_len`` the longest -> ``[N, Hq, D]``: each token attends to
    its own sequence's tokens up to itself."""
    return varlen_attn(q, k, v, cu_seqlens, cu_seqlens, max_len, max_len, scale=scale, **_KWARGS)


_KWARGS = _causal_kwargs() if varlen_attn is not None else {}
varlen_causal = _varlen_causal if varlen_attn is not None else None
