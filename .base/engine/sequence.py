"""A request: its sampling settings, and the request as the scheduler sees it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto
from itertools import count

import numpy as np

from common import is_int, is_number

MAX_TEMPERATURE = float(np.finfo(np.float32).max)  # a step sends temperatures as float32


@dataclass
class SamplingParams:
    """How to pick each next token of one request. Raises ValueError: temperature not a number in [0, float32's max],
    max_tokens not an integer >= 1, ignore_eos not a bool."""

    temperature: float = 1.0  # 0: greedy (argmax); > 0: sample from softmax(logits / temperature)
    max_tokens: int = 64  # most tokens to generate (>= 1)
    ignore_eos: bool = False  # keep generating past the end-of-sequence token (benchmarks use this)

    def __post_init__(self) -> None:
        if not is_number(self.temperature) or not 0 <= self.temperature <= MAX_TEMPERATURE:
            raise ValueError(f"temperature must be a number in [0, {MAX_TEMPERATURE:.3g}] (float32's largest), "
                             f"got {self.temperature!r}")
        if not is_int(self.max_tokens) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be True or False, got {self.ignore_eos!r}")


class SequenceStatus(Enum):
    """Where a sequence is in the scheduler: waiting (not yet, or again after preemption), running, finished."""
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


class Sequence:
    """One request as the scheduler sees it. ``token_ids``: prompt, then generated ids; a token the step in
    flight samples is a placeholder ``-(row + 1)`` (row ``row`` of its sampled tokens, read on the device)."""

    _ids = count()

    def __init__(self, token_ids: list[int], params: SamplingParams, block_size: int):
        self.seq_id = next(Sequence._ids)
        self.status = SequenceStatus.WAITING
        self.token_ids = list(token_ids)
        self.num_prompt_tokens = len(token_ids)
        self.num_cached_tokens = 0  # leading tokens whose KV is already in the cache (prefix-cache hits)
        self.block_table: list[int] = []  # KV-cache block ids, one per block_size tokens
        self.block_size = block_size
        self.temperature, self.max_tokens, self.ignore_eos = params.temperature, params.max_tokens, params.ignore_eos
        self.num_preemptions = 0
        self.finish_reason: str | None = None  # "stop" (an EOS id) or "length" (max_tokens, max_model_len)
        self.arrival_s = 0.0  # perf_counter() of arrival, first scheduled step, each token (rank 0 only)
        self.first_scheduled_s: float | None = None
        self.token_times_s: list[float] = []

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_completion_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def completion_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_blocks(self) -> int:
        return (len(self.token_ids) + self.block_size - 1) // self.block_size

    def block(self, i: int) -> list[int]:
        """Token ids of block ``i`` (the last block may be partial)."""
        return self.token_ids[i * self.block_size:(i + 1) * self.block_size]

    def append_placeholder(self, row: int) -> int:
        """Append the token that row ``row`` of the step just launched will sample; returns its position."""
        self.token_ids.append(-(row + 1))
        return len(self.token_ids) - 1
