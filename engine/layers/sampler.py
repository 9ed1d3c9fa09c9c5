"""Token sampling on rank 0: greedy at temperature 0, softmax sampling otherwise."""

from __future__ import annotations

import torch


def sample(logits: torch.Tensor, temperatures: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """logits ``[B, V]`` float32, temperatures ``[B]`` (0 = greedy) -> token ids ``[B]`` int64."""
    greedy = logits.argmax(dim=-1)
    if not bool((temperatures > 0).any()):
        return greedy
    t = temperatures.clamp(min=1e-5).unsqueeze(1)
    probs = torch.softmax(logits / t, dim=-1)
    sampled = torch.multinomial(probs, 1, generator=generator).squeeze(1)
    return torch.where(temperatures > 0, sampled, greedy)
