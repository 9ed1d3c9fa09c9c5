"""Column- and row-parallel linear layers (Megatron-LM, Shoeybi et al. 2019, section 3). A sharded parameter carries a
``weight_loader(param, src, *shard_id)`` that reads only this rank's rows or columns of ``src``, a safetensors slice
(``get_shape()``, ``src[a:b]``, ``src[:, a:b]``): a rank never reads other ranks' shards."""

from __future__ import annotations

import torch
from torch import nn

from .parallel import matmul_all_reduce, shard_range, tp_size


def check_shape(src, expected: tuple[int, ...]) -> None:
    """Raises ValueError when the checkpoint tensor's shape differs from ``expected``."""
    shape = tuple(src.get_shape())
    if shape != tuple(expected):
        raise ValueError(f"shape {list(shape)} in the checkpoint, expected {list(expected)}")


class MergedColumnParallelLinear(nn.Module):
    """Column-parallel projections of one input fused into one matmul (gate_proj + up_proj; no communication, the next
    RowParallelLinear consumes the shard): each rank's weight ``[sum(out_i) / tp, in]`` holds its shard of each part."""

    def __init__(self, in_features: int, output_sizes: list[int], bias: bool = False):
        super().__init__()
        self.output_sizes = list(output_sizes)
        start, end = shard_range(sum(output_sizes), "ColumnParallelLinear out_features")
        self.weight = nn.Parameter(torch.empty(end - start, in_features), requires_grad=False)
        self.weight.weight_loader = self.weight_loader
        self.bias = nn.Parameter(torch.empty(end - start), requires_grad=False) if bias else None
        if bias:
            self.bias.weight_loader = self.weight_loader

    def weight_loader(self, param: nn.Parameter, src, shard_id: int,
                      what: str = "MergedColumnParallelLinear part") -> None:
        full = self.output_sizes[shard_id]
        check_shape(src, (full, *param.shape[1:]))
        start, end = shard_range(full, what)
        offset = sum(self.output_sizes[:shard_id]) // tp_size()
        param.data[offset:offset + end - start].copy_(src[start:end])


class QKVParallelLinear(MergedColumnParallelLinear):
    """q, k and v projections fused; each rank holds ``num_heads / tp`` query heads and
    ``num_kv_heads / tp`` key/value heads: weight ``[(Hq + 2 Hkv) / tp * head_dim, hidden]``."""

    def __init__(self, hidden_size: int, head_dim: int, num_heads: int, num_kv_heads: int, bias: bool = False):
        super().__init__(hidden_size, [num_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * head_dim], bias)

    def weight_loader(self, param: nn.Parameter, src, shard_id: str) -> None:
        super().weight_loader(param, src, "qkv".index(shard_id), f"QKVParallelLinear {shard_id} heads")


class RowParallelLinear(nn.Module):
    """y = x W^T with W's input columns split over ranks: in ``[N, in / tp]``, out ``[N, out]`` summed
    over ranks by one all-reduce (``parallel.matmul_all_reduce``). A bias (whole on every rank, loaded by
    ``loader.default_weight_loader``) is added once, after it."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.in_start, self.in_end = shard_range(in_features, "RowParallelLinear in_features")
        self.weight = nn.Parameter(torch.empty(out_features, self.in_end - self.in_start), requires_grad=False)
        self.weight.weight_loader = self.weight_loader
        self.bias = nn.Parameter(torch.empty(out_features), requires_grad=False) if bias else None

    def weight_loader(self, param: nn.Parameter, src) -> None:
        check_shape(src, (self.out_features, self.in_features))
        param.data.copy_(src[:, self.in_start:self.in_end])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = matmul_all_reduce(x, self.weight)
        return y if self.bias is None else y + self.bias
