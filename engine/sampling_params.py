"""Per-request sampling settings."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class SamplingParams:
    """How to pick each next token of one request.

    Attributes:
        temperature: 0 means greedy (argmax); > 0 samples from softmax(logits / temperature).
        max_tokens: most tokens to generate (>= 1).
        ignore_eos: keep generating past the end-of-sequence token (benchmarks use this).
    Raises:
        ValueError: temperature < 0 or not finite, or max_tokens < 1.
    """

    temperature: float = 1.0
    max_tokens: int = 64
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
