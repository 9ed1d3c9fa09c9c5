"""What the generate loop keeps about each step: the one in flight (async scheduling) and the finished ones."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .sequence import Sequence


@dataclass
class InFlightStep:
    """A launched step whose sampled tokens (``tokens`` ``[B]`` int64, on the host once ``done``) are not
    yet read; the other fields go to its :class:`StepRecord`."""

    seqs: list[Sequence]
    positions: list[int]
    is_prefill: bool
    num_tokens: int
    tokens: torch.Tensor
    done: torch.cuda.Event | None
    launch_s: float
    send_ns: int
    message_bytes: int
    launch_ns: int | None = None


@dataclass
class StepRecord:
    """One engine step: kind, batch size, new tokens, wall time (s: from the previous step's tokens to
    this one's), rank 0's control-plane send (ns) and message size (bytes), and ``launch_ns``: from the start
    of that send to rank 0's ``run()`` returning (ns; None at tp=1), the reference for the workers' launch
    lag."""

    is_prefill: bool
    num_seqs: int
    num_tokens: int
    duration_s: float
    send_ns: int
    message_bytes: int
    launch_ns: int | None = None
