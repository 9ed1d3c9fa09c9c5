"""Per-request sampling settings."""

from __future__ import annotations

from dataclasses import dataclass

from common import is_int, is_number


@dataclass
class SamplingParams:
    """How to pick each next token of one request. Raises ValueError: temperature not a finite number >= 0,
    max_tokens not an integer >= 1, ignore_eos not a bool."""

    temperature: float = 1.0  # 0: greedy (argmax); > 0: sample from softmax(logits / temperature)
    max_tokens: int = 64  # most tokens to generate (>= 1)
    ignore_eos: bool = False  # keep generating past the end-of-sequence token (benchmarks use this)

    def __post_init__(self) -> None:
        t = self.temperature
        if not is_number(t) or t < 0:
            raise ValueError(f"temperature must be a number >= 0, got {t!r}")
        if not is_int(self.max_tokens) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be True or False, got {self.ignore_eos!r}")
