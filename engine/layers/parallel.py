"""The tensor-parallel rank and size of this process, from torch.distributed (1 process = rank 0 of 1)."""

from __future__ import annotations

import torch
import torch.distributed as dist


def tp_rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def tp_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum ``x`` over the ranks, in place (a no-op with one rank)."""
    if tp_size() > 1:
        dist.all_reduce(x)
    return x


def shard_range(full: int, what: str) -> tuple[int, int]:
    """``[start, end)`` of this rank's equal share of ``full`` rows.

    Raises:
        ValueError: ``full`` is not divisible by the tensor-parallel size.
    """
    size = tp_size()
    if full % size:
        raise ValueError(f"{what}: {full} is not divisible by tensor_parallel_size={size}")
    shard = full // size
    return tp_rank() * shard, (tp_rank() + 1) * shard
