"""Rotary position embedding (Su et al. 2021, RoFormer), "rotate half" layout as in transformers' Qwen3:
inv_freq_i = theta^(-2i / head_dim); cos/sin in float32, applied in the activation dtype."""

from __future__ import annotations

import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    """Precomputes cos/sin for positions ``[0, max_positions)``; forward gives cos and sin ``[N, D]``
    float32 at ``positions`` ``[N]`` (once per step; each layer applies them, see ``fusion``)."""

    def __init__(self, head_dim: int, max_positions: int, theta: float):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        freqs = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cos[positions], self.sin[positions]
