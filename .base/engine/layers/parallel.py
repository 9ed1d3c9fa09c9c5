"""This process's tensor-parallel rank and size (from torch.distributed; rank 0 of 1 without it) and the group's
all-reduce, chosen once per process by the model runner (``set_all_reduce``): process-wide state."""

from __future__ import annotations

import torch
import torch.distributed as dist

from .gemm import linear

_ALL_REDUCE = None  # the group's all-reduce, installed by the model runner before it builds a model


def tp_rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def tp_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def set_all_reduce(impl) -> None:
    """Install the group's all-reduce (an ``all_reduce.TorchAllReduce``; None at tp=1)."""
    global _ALL_REDUCE
    _ALL_REDUCE = impl


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """The sum of ``x`` over the ranks, same shape; use the returned tensor (a no-op with one rank)."""
    return x if tp_size() == 1 else _ALL_REDUCE(x)


def matmul_all_reduce(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x ``[N, in/tp]`` @ weight ``[out, in/tp]``.T summed over the ranks -> ``[N, out]`` (a row-parallel
    layer's output; with symmetric memory the GEMM writes into the shared buffer directly)."""
    return linear(x, weight) if tp_size() == 1 else _ALL_REDUCE.matmul(x, weight)


def shard_range(full: int, what: str) -> tuple[int, int]:
    """``[start, end)`` of this rank's equal share of ``full`` rows. Raises ValueError: tp does not divide it."""
    size = tp_size()
    if full % size:
        raise ValueError(f"{what}: {full} is not divisible by tensor_parallel_size={size}")
    shard = full // size
    return tp_rank() * shard, (tp_rank() + 1) * shard
