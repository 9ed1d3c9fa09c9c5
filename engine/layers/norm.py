"""RMSNorm (Zhang & Sennrich 2019), computed as transformers' Qwen3RMSNorm: in float32, then cast back
to the input dtype before the weight multiply."""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    """x ``[..., dim]`` -> x / sqrt(mean(x^2) + eps) * weight, same shape and dtype."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)
