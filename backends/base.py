"""The control-plane interface: rank 0 (a :class:`ControlPlane`) broadcasts (method, args) messages to ranks
1..world_size-1 (each a picklable :class:`WorkerEndpoint`). Backends move opaque bytes; framing, time stamps and
statistics live here. A message is ``send_ns`` (8 bytes: ``STAMP``) then ``pickle((method, args))``, ``send_ns``
being rank 0's ``time.monotonic_ns()`` before serialising, so ``recv_ns - send_ns`` on a worker is the one-way latency
(minus ``clock_offset_ns`` on another host). Every blocking wait calls ``liveness_check`` at least every POLL_S,
but gloo's, which block in C until the collective times out or a peer's socket closes.
"""
from __future__ import annotations

import contextlib
import inspect
import pickle
import struct
import time
from abc import ABC, abstractmethod
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

EXIT = "exit"
STAMP = struct.Struct("<q")  # fixed: a pickled int grows with the host's uptime, and the bytes per message with it
POLL_S = 0.05  # how often a blocked wait re-checks liveness (s)


class ControlPlaneError(RuntimeError):
    """The control plane cannot deliver: a peer is gone or a wait timed out."""


class PeerGone(ControlPlaneError):
    """The process on the other side of the control plane has exited."""


# Where a plane works (its class attribute ``scope``):
SPAWN = "spawn"      # its worker ends travel only to processes rank 0 spawns (semaphores, pipes): one host
HOST = "host"        # shared memory found by name: the ranks of one host, however they were started
NETWORK = "network"  # sockets: any ranks that reach rank 0 over the network


@dataclass(frozen=True)
class ControlContext:
    """Where the ranks run, for planes that care."""

    store: Any = None  # a torch.distributed Store every rank reaches; None: the plane makes its own
    host: str = "127.0.0.1"  # where the workers reach rank 0's host
    node_of: tuple[int, ...] = ()  # node of every rank (rank 0's is 0); the ranks of a node share /dev/shm
    launcher: str = "spawn"  # "spawn" (rank 0 started the workers) or "torchrun"
    startup_timeout_s: float = 600.0  # longest wait for the workers to join a plane at start-up (s)

    @property
    def num_nodes(self) -> int:
        return len(set(self.node_of)) or 1


class ControlStats:
    """Per-message samples of one side: sizes (bytes) and durations (ns), as int64 arrays."""

    def __init__(self) -> None:
        self.nbytes, self.ns = array("q"), array("q")

    def add(self, nbytes: int, ns: int) -> None:
        self.nbytes.append(nbytes)
        self.ns.append(ns)

    def last(self) -> tuple[int, int]:
        return self.nbytes[-1], self.ns[-1]

    def drop_last(self) -> ControlStats:
        """Forget the latest sample (the report message that asked for these); returns self."""
        del self.nbytes[-1:], self.ns[-1:]  # nothing when there is none
        return self

    def as_dict(self) -> dict[str, list[int]]:
        return {"nbytes": self.nbytes.tolist(), "ns": self.ns.tolist()}


class ControlPlane(ABC):
    """Rank 0's side, for ``world_size`` ranks (rank 0 included). ``timeout_s``: longest wait for a worker to
    take a message before :class:`ControlPlaneError` (s); ``context``: default one host, spawned workers."""

    name = "base"
    scope = SPAWN  # SPAWN, HOST or NETWORK: where this plane works
    liveness_check: Callable[[], None] = staticmethod(lambda: None)  # the owner's: raises when a worker is gone
    join_holds_gil = False  # True: joining the workers blocks in C code holding the GIL (gloo): no check runs

    def __init__(self, world_size: int, timeout_s: float = 60.0, context: ControlContext | None = None) -> None:
        self.world_size, self.num_workers, self.timeout_s = world_size, world_size - 1, timeout_s
        self.context = context or ControlContext(node_of=(0,) * world_size)
        self.send_stats = ControlStats()  # per send: the message size (bytes), serialise + write (ns)
        self.last_send_start_ns: int | None = None  # time.monotonic_ns() when the latest send began

    @classmethod
    def option_names(cls) -> list[str]:
        """The options of this plane: its constructor's arguments past world_size, timeout_s and context."""
        return [p for p in inspect.signature(cls.__init__).parameters
                if p not in ("self", "world_size", "timeout_s", "context")]

    @classmethod
    def scope_of(cls, options: dict) -> str:
        """This plane's scope with these constructor ``options`` (a wrapper plane's depends on them)."""
        return cls.scope

    @classmethod
    def check_options(cls, world_size: int, **options) -> None:
        """Raises ValueError for an option value this plane refuses (``options``: all of them, by name)."""

    @classmethod
    def check_timing(cls, timeout_s: float, **options) -> None:
        """Raises ValueError for an option that no wait of ``timeout_s`` (s) can outlast (``options``: all)."""

    def send(self, method: str, *args: Any) -> int:
        """Broadcast ``method(*args)``; returns its size (bytes). Raises ControlPlaneError: a timeout or a broken
        transport; else what ``liveness_check`` raises (the engine's: WorkerError, KeyboardInterrupt)."""
        if not self.num_workers:  # tp=1: there is nobody to tell
            self.send_stats.add(0, 0)
            return 0
        t0 = self.last_send_start_ns = time.monotonic_ns()
        payload = STAMP.pack(t0) + pickle.dumps((method, args), protocol=pickle.HIGHEST_PROTOCOL)
        self._send_bytes(payload)
        self.send_stats.add(len(payload), time.monotonic_ns() - t0)
        return len(payload)

    def ns_since_send(self) -> int | None:
        """ns since the latest :meth:`send` began; None before the first send or at tp=1."""
        return None if self.last_send_start_ns is None else time.monotonic_ns() - self.last_send_start_ns

    def take_send_stats(self) -> ControlStats:
        """The send samples so far; sampling starts afresh."""
        stats, self.send_stats = self.send_stats, ControlStats()
        return stats

    def send_exit(self) -> None:
        """Tell every worker to leave its command loop (best effort: errors are swallowed)."""
        with contextlib.suppress(Exception):
            self.send(EXIT)

    @abstractmethod
    def endpoint(self, rank: int) -> WorkerEndpoint:
        """The picklable receiving end for worker ``rank`` (1 <= rank < world_size)."""

    @abstractmethod
    def _send_bytes(self, payload: bytes) -> None:
        """Deliver ``payload`` to every worker, intact and in order."""

    def workers_started(self) -> None:
        """Called once the workers hold their endpoints."""

    def wait_ready(self) -> None:
        """Block until the workers have joined a plane that connects; ControlPlaneError after ``startup_timeout_s``."""

    def unlink(self) -> None:
        """Remove the names the workers found this plane by (segments, semaphores) once none will open it again;
        what is open keeps working. From then on a SIGKILL of rank 0 leaves none behind."""

    def close(self) -> None:
        """Release what the driver owns. Idempotent."""

    def _deadline_wait(self, ready: Callable[[float], bool], what: str, timeout_s: float | None = None) -> None:
        """``wait_until`` with this plane's liveness check; ControlPlaneError after ``timeout_s`` (default its own)."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        wait_until(ready, self.liveness_check, timeout_s,
                   lambda: ControlPlaneError(f"{self.name}: timed out after {timeout_s:.0f} s waiting for {what}"))


class WorkerEndpoint(ABC):
    """Worker ``rank``'s side, receiving rank 0's messages in order; ``conn``: its transport's picklable end, if any."""

    liveness_check: Callable[[], None] = staticmethod(lambda: None)  # the owner's: raises when rank 0 is gone

    def __init__(self, rank: int, conn: Any = None) -> None:
        self.rank, self.conn = rank, conn
        self.recv_stats = ControlStats()  # per message: its size (bytes), receive-done minus send-start (ns)
        self.clock_offset_ns = 0  # this host's monotonic clock minus rank 0's (0 on rank 0's host)
        self.last_send_ns: int | None = None  # rank 0's time.monotonic_ns() when it began sending the latest

    def open(self, store=None) -> None:
        """Attach to the transport, once, in the worker process. ``store``: the run's Store, if any."""

    def take_recv_stats(self) -> ControlStats:
        """The receive samples so far; sampling starts afresh."""
        stats, self.recv_stats = self.recv_stats, ControlStats()
        return stats

    def recv(self) -> tuple[str, tuple]:
        """The next message's ``(method, args)``. Raises PeerGone / ControlPlaneError: from the liveness check."""
        payload = self._recv_bytes()
        (send_ns,), (method, args) = STAMP.unpack_from(payload), pickle.loads(memoryview(payload)[STAMP.size:])
        self.last_send_ns = send_ns
        self.recv_stats.add(len(payload), time.monotonic_ns() - self.clock_offset_ns - send_ns)
        return method, args

    def ns_since_send(self) -> int | None:
        """ns since rank 0 began sending the latest message; None when it did not travel (``ideal``'s replay)."""
        return None if self.last_send_ns is None else time.monotonic_ns() - self.clock_offset_ns - self.last_send_ns

    @abstractmethod
    def _recv_bytes(self) -> bytes:
        """Block until one whole message has arrived, without a bound: an idle engine may send nothing for long."""

    def close(self) -> None:
        """Detach from the transport. Idempotent."""


def wait_until(ready: Callable[[float], Any], check: Callable[[], None], timeout_s: float | None = None,
               timed_out: Callable[[], Exception] | None = None) -> Any:
    """Call ``ready(POLL_S)`` (it may block that long) until it returns a true value, and return that; ``check()``
    between tries. Raises ``timed_out()`` after ``timeout_s`` (s; None: no bound), or what ``check`` raises."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while not (got := ready(POLL_S)):
        check()
        if deadline is not None and time.monotonic() > deadline:
            raise timed_out()
    return got
