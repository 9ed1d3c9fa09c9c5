"""One step's sequences as flat int32 arrays: the control-plane message (read as zero-copy numpy views) and
every rank's model input; and what rank 0's generate loop keeps about each step (in flight, finished). Wire layout,
int32 little-endian: ``[is_prefill, B, N, total_blocks, seed, has_temperatures]``, ``num_tokens[B]``, ``num_new[B]``
(prefill only), ``temperatures[B]`` (float32 bits; only when a row samples at temperature > 0), ``token_ids[N]``
(negative: async placeholders), ``num_blocks[B]``, ``block_ids[total_blocks]`` (the block tables, concatenated).
Every rank samples its own vocabulary shard."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain

import numpy as np
import torch

from .sequence import Sequence

HEADER = 6


@dataclass
class StepBatch:
    """One step's batch; the arrays are int32 unless noted."""

    is_prefill: bool
    num_tokens: np.ndarray  # [B] tokens of each sequence, this step's new ones included
    num_new: np.ndarray  # [B] new tokens: the uncached tail in prefill, 1 in decode
    token_ids: np.ndarray  # [N = sum(num_new)] the new tokens in sequence order; -(r + 1): row r of the last samples
    num_blocks: np.ndarray  # [B] block-table lengths
    block_ids: np.ndarray  # [sum(num_blocks)] the block tables, concatenated
    seed: int = 0  # 0 <= seed < 2**31: keys the step's sampling noise
    temperatures: np.ndarray | None = None  # [B] float32; None: every row greedy

    @property
    def num_seqs(self) -> int:
        return len(self.num_tokens)

    @classmethod
    def from_sequences(cls, seqs, is_prefill: bool, seed: int = 0) -> StepBatch:
        """The step over ``seqs`` (``Sequence`` objects): in prefill each one's tokens past its cached
        prefix, in decode its last token; ``seed`` keys the sampling noise of rows with temperature > 0."""
        B = len(seqs)
        tables = [s.block_table for s in seqs]
        num_blocks = np.fromiter(map(len, tables), np.int32, B)
        block_ids = np.fromiter(chain.from_iterable(tables), np.int32, int(num_blocks.sum()))
        num_tokens = np.fromiter(map(len, seqs), np.int32, B)
        if is_prefill:
            new = [s.token_ids[s.num_cached_tokens:] for s in seqs]
            num_new = np.fromiter(map(len, new), np.int32, B)
            token_ids = np.fromiter(chain.from_iterable(new), np.int32, int(num_new.sum()))
        else:
            num_new = np.ones(B, np.int32)
            token_ids = np.fromiter((s.token_ids[-1] for s in seqs), np.int32, B)
        temps = np.fromiter((s.temperature for s in seqs), np.float32, B)
        return cls(is_prefill, num_tokens, num_new, token_ids, num_blocks, block_ids, seed,
                   temps if temps.any() else None)

    def to_bytes(self) -> bytes:
        temps = self.temperatures
        head = np.array([self.is_prefill, self.num_seqs, len(self.token_ids), len(self.block_ids), self.seed,
                         temps is not None], np.int32)
        parts = [head, self.num_tokens] + ([self.num_new] if self.is_prefill else [])
        parts += [] if temps is None else [np.asarray(temps, "<f4").view("<i4")]
        return np.concatenate(parts + [self.token_ids, self.num_blocks, self.block_ids]).astype("<i4").tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> StepBatch:
        """Inverse of :meth:`to_bytes` (views into ``data``, no copy). Raises ValueError: not a whole message."""
        a = np.frombuffer(data, "<i4")
        if len(a) < HEADER:
            raise ValueError(f"step message of {len(data)} bytes is shorter than its header")
        is_prefill, B, N, nb, seed, has_temps = (int(x) for x in a[:HEADER])
        if len(a) != HEADER + B * (2 + bool(is_prefill) + bool(has_temps)) + N + nb:
            raise ValueError(f"step message of {len(data)} bytes does not match its header {a[:HEADER].tolist()}")
        at = HEADER + B * (1 + bool(is_prefill))
        num_tokens = a[HEADER:HEADER + B]
        num_new = a[HEADER + B:at] if is_prefill else np.ones(B, np.int32)
        temperatures = a[at:at + B].view("<f4") if has_temps else None
        at += B * bool(has_temps)
        token_ids = a[at:at + N]
        num_blocks = a[at + N:at + N + B]
        block_ids = a[at + N + B:]
        return cls(bool(is_prefill), num_tokens, num_new, token_ids, num_blocks, block_ids, seed, temperatures)

    def block_tables(self, width: int | None = None) -> np.ndarray:
        """``[B, width]`` int32 block tables (``width`` defaults to the widest), padded with block 0 (never
        read: past every context length or masked)."""
        width = int(self.num_blocks.max()) if width is None else width
        tables = np.zeros((self.num_seqs, width), np.int32)
        tables[np.arange(width) < self.num_blocks[:, None]] = self.block_ids  # row-major: row i's first num_blocks[i]
        return tables


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
    """A launched step whose sampled ``tokens`` (``[B]`` int64, on the host once ``done``) are not yet read;
    ``ready_s``: when they were (CPU: as ``run()`` returned; CUDA: None, known once ``done`` is seen)."""

    seqs: list[Sequence]
    positions: list[int]
    tokens: torch.Tensor
    done: torch.cuda.Event | None
    launch_s: float
    record: StepRecord
    ready_s: float | None = None

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
            deadline, next_check = time.monotonic() + timeout_s, time.monotonic() + 0.05
            while not self.done.query():
                time.sleep(0)
                now = time.monotonic()
                if now > next_check:
                    check()
                    next_check = now + 0.05
                if now > deadline:
                    raise TimeoutError(f"a step's tokens did not arrive within timeout_s={timeout_s}")
        return self.tokens.tolist()
