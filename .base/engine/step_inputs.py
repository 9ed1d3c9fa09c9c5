"""Turns one step's sequences into the model's input tensors (identically on every rank)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .layers.attention import AttentionMetadata
from .step_batch import StepBatch


@dataclass
class StepInputs:
    """input_ids / positions ``[N]`` int64, logits_index ``[B]`` (the last new token of each sequence);
    previous_tokens ``[B_prev]`` int64: the last step's sampled tokens, which an input id ``-(r + 1)`` stands for
    (None: no id is negative)."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    logits_index: torch.Tensor
    attn: AttentionMetadata
    previous_tokens: torch.Tensor | None = None


def _tensor(a: np.ndarray, device: torch.device, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    # torch.tensor copies: the message's arrays are read-only views of the received bytes.
    return torch.tensor(a, dtype=dtype).to(device, non_blocking=True)


def slot_mapping(tables: np.ndarray, rows: np.ndarray, positions: np.ndarray, block_size: int) -> np.ndarray:
    """Cache slot of each token: ``tables`` ``[B, W]`` block tables, ``rows`` ``[N]`` each token's sequence,
    ``positions`` ``[N]`` its position -> ``[N]`` int64, block_id * block_size + offset in the block."""
    return tables[rows, positions // block_size].astype(np.int64) * block_size + positions % block_size


def token_layout(batch: StepBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Where ``batch``'s new tokens sit: (each one's sequence ``[N]``, its index among its sequence's new ones
    ``[N]``, its position ``[N]``, each sequence's end in the flat token dimension ``[B]``), int64."""
    q_lens, k_lens = batch.num_new.astype(np.int64), batch.num_tokens.astype(np.int64)
    ends = np.cumsum(q_lens)
    seq_of = np.repeat(np.arange(batch.num_seqs), q_lens)
    offset = np.arange(int(ends[-1])) - np.repeat(ends - q_lens, q_lens)
    return seq_of, offset, np.repeat(k_lens - q_lens, q_lens) + offset, ends


def build_step_inputs(batch: StepBatch, block_size: int, device: torch.device) -> StepInputs:
    """Prefill (and, on CPU, decode) inputs for ``batch``: each sequence's last ``num_new`` of its ``num_tokens``."""
    B, q_lens, k_lens = batch.num_seqs, batch.num_new.astype(np.int64), batch.num_tokens.astype(np.int64)
    max_q, max_k = int(q_lens.max()), int(k_lens.max())
    seq_of, offset, positions, ends = token_layout(batch)
    tables = batch.block_tables()
    slots = slot_mapping(tables, seq_of, positions, block_size)
    spans = mask = cu_seqlens = None
    if device.type == "cuda" and np.array_equal(q_lens, k_lens):
        # No cached prefix on CUDA: varlen flash over each sequence's own q/k/v; spans: its [start, end) in N.
        spans = list(zip((ends - q_lens).tolist(), ends.tolist(), strict=True))
        cu_seqlens = _tensor(np.concatenate([[0], ends]), device, torch.int32)
    else:
        # Absolute position of each padded query row; padding rows get position 0 so they attend to key 0
        # (never an all-False mask row, which would give NaN).
        q_pos = np.zeros((B, max_q), np.int64)
        q_pos[seq_of, offset] = positions
        k_pos = torch.arange(max_k)
        mask = (k_pos <= torch.from_numpy(q_pos)[..., None]) & (k_pos < torch.from_numpy(k_lens)[:, None, None])
        mask = mask.unsqueeze(1).to(device, non_blocking=True)
    attn = AttentionMetadata(slot_mapping=_tensor(slots, device), block_tables=_tensor(tables, device),
                             q_pad_index=_tensor(seq_of * max_q + offset, device), mask=mask, num_seqs=B,
                             max_q_len=max_q, max_k_len=max_k, prefill_spans=spans, cu_seqlens=cu_seqlens)
    return StepInputs(input_ids=_tensor(batch.token_ids, device), positions=_tensor(positions, device),
                      logits_index=_tensor(ends - 1, device), attn=attn)


def longest_first(context_lens: np.ndarray) -> np.ndarray:
    """``[B]`` -> the sequences' indices ``[B]``, longest context first (ties in batch order): the order the decode
    kernel starts their programs in, so that its last wave holds the shortest (longest-processing-time first)."""
    return np.argsort(-context_lens.astype(np.int64), kind="stable")


def build_decode_inputs(batch: StepBatch, block_size: int, device: torch.device) -> StepInputs:
    """Decode inputs for the Triton paged-attention path (CUDA): one new token per sequence, ``context_lens``
    ``[B]`` int32, ``block_tables`` ``[B, widest table]`` int32 and ``decode_order``; no mask, no query padding."""
    n = batch.num_seqs
    positions = batch.num_tokens.astype(np.int64) - 1
    tables = batch.block_tables()
    slots = slot_mapping(tables, np.arange(n), positions, block_size)
    attn = AttentionMetadata(slot_mapping=_tensor(slots, device), block_tables=_tensor(tables, device, torch.int32),
                             context_lens=_tensor(batch.num_tokens, device, torch.int32), q_pad_index=None,
                             mask=None, num_seqs=n, max_q_len=1, max_k_len=int(batch.num_tokens.max()),
                             decode_order=_tensor(longest_first(batch.num_tokens), device, torch.int32))
    return StepInputs(input_ids=_tensor(batch.token_ids, device), positions=_tensor(positions, device),
                      logits_index=torch.arange(n, device=device), attn=attn)
