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
    # argmax(p / E) with E ~ Exp(1) is a draw from p (the exponential race, equivalent to Gumbel-max):
    # one pass over the vocabulary instead of multinomial's cumulative sum.
    noise = torch.empty_like(probs).exponential_(1.0, generator=generator)
    sampled = probs.div_(noise).argmax(dim=-1)
    return torch.where(temperatures > 0, sampled, greedy)
