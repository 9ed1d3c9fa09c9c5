"""How many programs split-KV decode attention (``paged_decode``) gives each (sequence, KV head): one KV tile of the
longest context each, up to ``PROGRAMS_PER_SM`` programs per SM (one wave), at most ``MAX_SPLITS`` (the H200's fastest,
results/h200/NOTES.md). Each count is a CUDA graph of its own, so counts go up in powers of two."""

from __future__ import annotations

import functools

import torch

PROGRAMS_PER_SM = 4
MAX_SPLITS = 64
TILE_TOKENS = 64  # tokens per iteration of the decode kernel (paged_decode_attention's block_n), or the block size
WIDE_TILE = (128, 8)  # batch 1, one split, GQA group <= WIDE_MAX_GROUP: (tokens, warps) of a tile taking 66-128 tokens
WIDE_MAX_GROUP = 2  # the wide tile gained 1.05% at Qwen3-0.6B's group (2) and lost 0.17% at the 8B's (4), call 137


@functools.cache
def sm_count(device: torch.device) -> int:
    """The device's SM count (132, an H100/H200's, off CUDA)."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 132


def one_wave(programs: int, device: torch.device) -> bool:
    """Whether a decode launch's ``programs`` all start at once (at most ``PROGRAMS_PER_SM`` per SM): then the
    first tile may load before the PDL wait, and the order they start in does not matter."""
    return programs <= PROGRAMS_PER_SM * sm_count(device)


def max_splits(batch: int, num_kv_heads: int, device: torch.device) -> int:
    """The most splits per sequence whose programs still start at once (``one_wave``), at most ``MAX_SPLITS``; 1
    when batch x KV heads fill a wave alone. A program more waits for a slot: a wave for a few programs (call 100)."""
    return max(1, min(MAX_SPLITS, PROGRAMS_PER_SM * sm_count(device) // (batch * num_kv_heads)))


def split_counts(batch: int, num_kv_heads: int, device: torch.device) -> list[int]:
    """Every split count a decode step at this batch size may use: 1, the powers of two below the cap, the cap."""
    cap = max_splits(batch, num_kv_heads, device)
    return [1] + [1 << i for i in range(1, cap.bit_length()) if 1 << i < cap] + ([cap] if cap > 1 else [])


def launch(batch: int, splits: int, group: int, block_size: int) -> tuple[int, int]:
    """The decode kernel's (tokens per tile, warps) for ``group`` query heads per KV head: ``WIDE_TILE`` for one
    split at batch 1 and a group up to ``WIDE_MAX_GROUP`` (every tile then loads before the PDL wait and no merge
    kernel follows), else ``TILE_TOKENS`` at 2 warps; never more than a block. More splits of the wide tile ran
    faster alone at 160-1024 tokens but lost in the 8B's step, and alone at 4k-32k (calls 136-137)."""
    if batch == 1 and splits == 1 and group <= WIDE_MAX_GROUP and WIDE_TILE[0] <= block_size:
        return WIDE_TILE
    return min(TILE_TOKENS, block_size), 2


def num_splits(batch: int, num_kv_heads: int, group: int, max_context: int, block_size: int,
               device: torch.device) -> int:
    """The split count for a longest context of ``max_context`` tokens (the new one included): the fewest of
    ``split_counts`` that give each program at most one tile (``launch``) of cached tokens, or the cap."""
    counts = split_counts(batch, num_kv_heads, device)
    return next((c for c in counts if c * launch(batch, c, group, block_size)[0] >= max_context - 1), counts[-1])
