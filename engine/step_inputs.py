"""Turns one step's sequences into the model's input tensors (identically on every rank)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .layers.attention import AttentionMetadata


@dataclass
class StepInputs:
    """input_ids / positions ``[N]`` int64, logits_index ``[B]`` (the last new token of each sequence)."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    logits_index: torch.Tensor
    attn: AttentionMetadata


def padded_block_tables(views, dtype: torch.dtype) -> torch.Tensor:
    """``[B, widest table]`` block tables, rows padded with block 0 (never read: masked or past the
    context length), built with one tensor call."""
    width = max(len(bt) for _, bt, _ in views)
    return torch.tensor([bt + [0] * (width - len(bt)) for _, bt, _ in views], dtype=dtype)


def build_step_inputs(views: list[tuple[int, list[int], list[int]]], block_size: int,
                      device: torch.device) -> StepInputs:
    """``views``: per sequence ``(num_tokens, block_table, new_token_ids)`` (``Sequence.step_view``); the
    new tokens are the last ``len(new_token_ids)`` of the sequence: its uncached tail in prefill, its
    last token in decode."""
    input_ids, positions, slots, q_pad_index = [], [], [], []
    q_lens, k_lens = [], []
    max_q = max(len(new) for _, _, new in views)
    for b, (num_tokens, block_table, new) in enumerate(views):
        start = num_tokens - len(new)
        input_ids.extend(new)
        positions.extend(range(start, num_tokens))
        slots.extend(block_table[p // block_size] * block_size + p % block_size for p in range(start, num_tokens))
        q_pad_index.extend(range(b * max_q, b * max_q + len(new)))
        q_lens.append(len(new))
        k_lens.append(num_tokens)
    max_k = max(k_lens)
    tables = padded_block_tables(views, torch.int64)
    q_lens_t, k_lens_t = torch.tensor(q_lens), torch.tensor(k_lens)
    ends = torch.cumsum(q_lens_t, 0)
    logits_index = ends - 1
    spans = mask = cu_seqlens = None
    if device.type == "cuda" and q_lens == k_lens:
        # No cached prefix on CUDA: causal attention per sequence on its own q/k/v (flash kernels, no padding,
        # no gather, no mask); spans are each sequence's [start, end) in the flat token dimension.
        ends_list = ends.tolist()
        spans = list(zip([0] + ends_list[:-1], ends_list))
        cu_seqlens = torch.tensor([0] + ends_list, dtype=torch.int32)
    else:
        # Absolute position of each padded query row; padding rows get position 0 so they attend to key 0
        # (never an all-False mask row, which would give NaN).
        q_pos = (k_lens_t - q_lens_t).unsqueeze(1) + torch.arange(max_q).unsqueeze(0)
        q_pos = torch.where(torch.arange(max_q).unsqueeze(0) < q_lens_t.unsqueeze(1), q_pos, 0)
        k_pos = torch.arange(max_k)
        mask = (k_pos.view(1, 1, -1) <= q_pos.unsqueeze(-1)) & (k_pos.view(1, 1, -1) < k_lens_t.view(-1, 1, 1))

    def dev(t):
        return t.to(device, non_blocking=True)

    attn = AttentionMetadata(slot_mapping=dev(torch.tensor(slots, dtype=torch.int64)), block_tables=dev(tables),
                             q_pad_index=dev(torch.tensor(q_pad_index, dtype=torch.int64)),
                             mask=None if mask is None else dev(mask.unsqueeze(1)), num_seqs=len(views), max_q_len=max_q,
                             max_k_len=max_k, prefill_spans=spans,
                             cu_seqlens=None if cu_seqlens is None else dev(cu_seqlens))
    return StepInputs(input_ids=dev(torch.tensor(input_ids, dtype=torch.int64)),
                      positions=dev(torch.tensor(positions, dtype=torch.int64)),
                      logits_index=dev(logits_index), attn=attn)


def build_decode_inputs(views: list[tuple[int, list[int], list[int]]], block_size: int, device: torch.device,
                        max_blocks: int | None = None) -> StepInputs:
    """Decode inputs for the Triton paged-attention path (CUDA): one new token per sequence,
    ``context_lens`` ``[B]`` int32 and ``block_tables`` ``[B, widest table]`` int32 (the CUDA graphs copy it
    into their fixed-width buffer). No mask and no query padding are needed."""
    n = len(views)
    input_ids, positions, slots, lens = [], [], [], []
    for num_tokens, block_table, new in views:
        pos = num_tokens - 1
        input_ids.append(new[-1])
        positions.append(pos)
        slots.append(block_table[pos // block_size] * block_size + pos % block_size)
        lens.append(num_tokens)
    tables = padded_block_tables(views, torch.int32)

    def dev(values, dtype):
        return torch.tensor(values, dtype=dtype).to(device, non_blocking=True)

    attn = AttentionMetadata(slot_mapping=dev(slots, torch.int64), block_tables=tables.to(device, non_blocking=True),
                             q_pad_index=None, mask=None, num_seqs=n, max_q_len=1, max_k_len=max(lens),
                             context_lens=dev(lens, torch.int32))
    return StepInputs(input_ids=dev(input_ids, torch.int64), positions=dev(positions, torch.int64),
                      logits_index=torch.arange(n, device=device), attn=attn)


def resolve_placeholders(input_ids: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
    """input_ids ``[N]`` int64 where ``-(r + 1)`` stands for ``previous[r]`` (``[B_prev]`` int64, the
    previous step's sampled tokens, on the same device) -> ``[N]`` int64 with the placeholders filled in,
    on the device and without a host sync."""
    rows = (-input_ids - 1).clamp_(min=0)
    return torch.where(input_ids < 0, previous[rows], input_ids)
