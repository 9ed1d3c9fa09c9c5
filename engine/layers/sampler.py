"""Token sampling on rank 0: greedy at temperature 0, softmax sampling otherwise."""

from __future__ import annotations

import torch


def sample(logits: torch.Tensor, temperatures: list[float], generator: torch.Generator) -> torch.Tensor:
    """logits ``[B, V]``, ``temperatures`` one per row (0 = greedy), ``generator`` a CPU generator (the
    run's seed) -> token ids ``[B]`` int64 on the logits' device.

    Never synchronises the device (the caller schedules the next step while this one runs). On CUDA one
    Triton pass over the logits (``sampling_kernel``); on CPU the same draw in torch: with
    p = softmax(logits / t), argmax(p / E), E ~ Exp(1), is a draw from p (the exponential race,
    equivalent to Gumbel-max), and log p differs from logits / t by a per-row constant, so
    argmax(logits / t - log E) is the same draw without the softmax.
    """
    if logits.is_cuda:
        from .sampling_kernel import sample_triton  # Triton: CUDA machines only

        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
        t = torch.tensor(temperatures, dtype=torch.float32).to(logits.device, non_blocking=True)
        return sample_triton(logits, t, seed)
    logits = logits.float()
    greedy = logits.argmax(dim=-1)
    if not any(t > 0 for t in temperatures):
        return greedy
    t = torch.tensor(temperatures, dtype=torch.float32)
    noise = torch.empty_like(logits).exponential_(1.0, generator=generator).log_()
    sampled = (logits / t.clamp(min=1e-5).unsqueeze(1)).sub_(noise).argmax(dim=-1)
    return torch.where(t > 0, sampled, greedy)
