"""``ideal``: the zero-transport baseline: every other plane's decode step minus ideal's is what it exposes.

In an untimed recording pass messages travel over an ordinary plane (``inner``) and rank 0 records them; it then
ships the recording to every worker, and in the timed pass sends nothing: each worker takes the next recorded
message from memory, while rank 0 checks that every step equals the recorded one byte for byte (else
:class:`ScheduleMismatch`). Messages outside a replay travel over the inner plane. The owner calls
``start_recording()``, the recording pass, ``stop_recording()``, ``start_replay()``, the timed pass,
``finish_replay()``, with ``LLM.reset()`` before each pass.
"""

from __future__ import annotations

import time
from collections import deque

from . import available, get_control_plane
from .base import ControlPlane, ControlPlaneError, WorkerEndpoint

REPLAY = "control_replay"  # inner-plane message carrying the recording to the workers
NO_BASELINE = "the schedule did not reproduce, so this run has no zero-transport baseline"


class ScheduleMismatch(ControlPlaneError):
    """The timed pass scheduled a step that differs from the recording (or a different number of steps)."""


def _inner_class(inner: str):
    """Raises ValueError unless ``inner`` names another registered plane."""
    if inner == IdealControlPlane.name or inner not in available():
        raise ValueError(f"ideal option inner must be another control plane "
                         f"({', '.join(n for n in available() if n != 'ideal')}), got {inner!r}")
    return get_control_plane(inner)


def _describe(message: tuple) -> str:
    method, args = message
    size = sum(len(a) for a in args if isinstance(a, (bytes, bytearray)))
    return f"{method} ({size} bytes)"


class _WrapsInner:
    """Liveness check and close go to the wrapped plane or endpoint, whose waits call the check."""

    @property
    def liveness_check(self):
        return self.inner.liveness_check

    @liveness_check.setter
    def liveness_check(self, check) -> None:
        self.inner.liveness_check = check

    def close(self) -> None:
        self.inner.close()


class IdealControlPlane(_WrapsInner, ControlPlane):
    """Driver side; ``inner``: the plane that carries every message outside a replay; ``inner_options``: its
    options. Raises ValueError: ``inner`` is ideal itself or unknown."""

    name = "ideal"

    def __init__(self, world_size: int, timeout_s: float = 60.0, inner: str = "pipe", inner_options: dict | None = None,
                 context=None):
        super().__init__(world_size, timeout_s, context)
        self.inner = _inner_class(inner)(world_size, timeout_s=timeout_s, context=context, **(inner_options or {}))
        self._recording = self._recorded = self._expected = None  # lists of (method, args)
        self._sizes: list[int] = []  # each recorded message's size as the inner plane sent it (bytes)
        self._replayed = 0

    @classmethod
    def check_options(cls, world_size: int, inner="pipe", inner_options=None) -> None:
        _inner_class(inner)  # the inner plane's own options are checked when it is built

    @classmethod
    def scope_of(cls, options: dict) -> str:
        return _inner_class(options.get("inner", "pipe")).scope_of(options.get("inner_options") or {})

    def endpoint(self, rank: int) -> IdealEndpoint:
        return IdealEndpoint(rank, self.inner.endpoint(rank))

    @property
    def join_holds_gil(self) -> bool:
        return self.inner.join_holds_gil

    def workers_started(self) -> None:
        self.inner.workers_started()

    def wait_ready(self) -> None:
        self.inner.wait_ready()

    def unlink(self) -> None:
        self.inner.unlink()

    def start_recording(self) -> None:
        """Record every message sent until :meth:`stop_recording` (they still travel); ends any replay."""
        self._recording, self._expected, self._sizes = [], None, []

    def stop_recording(self) -> int:
        """Keep what was recorded for :meth:`start_replay`; returns the number of messages."""
        self._recorded, self._recording = self._recording, None
        return len(self._recorded or [])

    def start_replay(self) -> int:
        """Ship the recording to the workers; from now on :meth:`send` checks each message against it and sends
        nothing. Returns the number of recorded messages. Raises ControlPlaneError: no recording (``stop_recording``
        not called)."""
        if self._recorded is None:
            raise ControlPlaneError("ideal: start_replay() without a recording")
        recording, self._recorded = self._recorded, None
        self.inner.send(REPLAY, recording)
        self._expected, self._replayed = recording, 0
        return len(recording)

    def finish_replay(self) -> None:
        """End the replay. Raises :class:`ScheduleMismatch` when fewer steps ran than were recorded."""
        expected, self._expected = self._expected, None
        if expected is not None and (i := self._replayed) != len(expected):
            raise ScheduleMismatch(f"ideal: the timed pass sent {i} messages where the recording has {len(expected)} "
                                   f"(the next was {_describe(expected[i])}): {NO_BASELINE}")

    def send(self, method: str, *args) -> int:
        if self._expected is None:
            n = self.inner.send(method, *args)
            if self._recording is not None:
                self._recording.append((method, args))
                self._sizes.append(n)
            self.send_stats.add(n, self.inner.send_stats.last()[1])
            self.last_send_start_ns = self.inner.last_send_start_ns
            return n
        t0 = self.last_send_start_ns = time.monotonic_ns()
        i = self._replayed
        if i >= len(self._expected) or self._expected[i] != (method, args):
            want = _describe(self._expected[i]) if i < len(self._expected) else "nothing (the recording ended)"
            raise ScheduleMismatch(f"ideal: step {i} of the timed pass is {_describe((method, args))} where the "
                                   f"recording has {want}: {NO_BASELINE}")
        n = self._sizes[i]  # what a plane would have sent: its bytes compare with theirs
        self._replayed += 1
        self.send_stats.add(n, time.monotonic_ns() - t0)
        return n

    def send_exit(self) -> None:
        self._expected = self._recording = None  # whatever the state, the exit message travels
        super().send_exit()

    def _send_bytes(self, payload: bytes) -> None:  # every send goes through send() above
        raise NotImplementedError


class IdealEndpoint(_WrapsInner, WorkerEndpoint):
    """Worker side: the inner plane's endpoint, and preloaded messages ``recv`` takes first (no receive sample)."""

    def __init__(self, rank: int, inner: WorkerEndpoint):
        super().__init__(rank)
        self.inner, self.preloaded = inner, deque()

    def open(self, store=None) -> None:
        self.inner.open(store)

    def recv(self) -> tuple[str, tuple]:
        while not self.preloaded:
            method, args = self.inner.recv()
            if method != REPLAY:
                self.recv_stats.add(*self.inner.recv_stats.last())
                self.last_send_ns = self.inner.last_send_ns
                return method, args
            self.preloaded.extend(args[0])
        self.last_send_ns = None  # replayed: no send to measure from, so no one-way sample (not a 0)
        return self.preloaded.popleft()

    def _recv_bytes(self) -> bytes:  # every receive goes through recv() above
        raise NotImplementedError


CONTROL_PLANE = IdealControlPlane
