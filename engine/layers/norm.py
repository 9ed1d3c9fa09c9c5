"""RMSNorm (Zhang & Sennrich 2019), computed as transformers' Qwen3RMSNorm: in float32, then cast back
to the input dtype before the weight multiply."""

from __future__ import annotations

import torch
from torch import nn

from .fusion import ElementwiseOps


class RMSNorm(nn.Module):
    """x ``[..., dim]`` -> x / sqrt(mean(x^2) + eps) * weight, same shape and dtype. With ``residual``,
    normalises ``x + residual`` and returns ``(normed, x + residual)`` (one fused kernel on CUDA). ``ops``:
    the model's elementwise functions (its own eager set when not given)."""

    def __init__(self, dim: int, eps: float, ops: ElementwiseOps | None = None):
        super().__init__()
        self.eps = eps
        self.ops = ops or ElementwiseOps()
        self.weight = nn.Parameter(torch.ones(dim), requires_grad=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is None:
            return self.ops.rms_norm(x, self.weight, self.eps)
        return self.ops.add_rms_norm(x, residual, self.weight, self.eps)
