"""What the generate loop keeps about each step: the one in flight (async scheduling) and the finished ones."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .sequence import Sequence


@dataclass
class StepRecord:
    """One engine step: kind, batch size, new tokens, wall time (s, from the previous step's tokens to this one's),
    rank 0's send (ns), message size (bytes), ``launch_ns``: from the send to rank 0's ``run()`` returning (ns)."""

    is_prefill: bool
    num_seqs: int
    num_tokens: int
    duration_s: float
    send_ns: int
    message_bytes: int
    launch_ns: int | None = None


@dataclass
class InFlightStep:
    """A launched step whose sampled ``tokens`` (``[B]`` int64, on the host once ``done``) are not yet read."""

    seqs: list[Sequence]
    positions: list[int]
    tokens: torch.Tensor
    done: torch.cuda.Event | None
    launch_s: float
    record: StepRecord

    @staticmethod
    def copy_to_host(tokens: torch.Tensor) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        """Start copying ``tokens`` to pinned host memory; returns (host tensor, copy event) (CPU: tokens, None)."""
        if not tokens.is_cuda:
            return tokens, None
        host = torch.empty(tokens.shape, dtype=tokens.dtype, pin_memory=True)
        host.copy_(tokens, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        return host, done

    def wait_tokens(self, timeout_s: float, check: Callable[[], None]) -> list[int]:
        """The step's sampled tokens, ``check`` called every 50 ms; each poll releases the GIL (``time.sleep(0)``: a
        tight ``query()`` loop starves rank 0's control-plane threads). Raises TimeoutError: none in ``timeout_s``."""
        if self.done is not None:
            deadline = time.monotonic() + timeout_s
            next_check = time.monotonic() + 0.05
            while not self.done.query():
                time.sleep(0)
                now = time.monotonic()
                if now > next_check:
                    check()
                    next_check = now + 0.05
                if now > deadline:
                    raise TimeoutError(f"a step's tokens did not arrive within timeout_s={timeout_s}")
        return self.tokens.tolist()
