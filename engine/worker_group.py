"""Rank 0's view of the worker processes: spawning, the rendezvous store, liveness and shutdown."""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from datetime import timedelta

from torch.distributed import TCPStore

from backends import ControlPlane

from .config import EngineConfig
from .worker import worker_main

POLL_S = 0.05


class WorkerError(RuntimeError):
    """A worker process failed; the message names the rank and carries its traceback when it sent one."""

    def __init__(self, rank: int, detail: str):
        super().__init__(f"tensor-parallel worker rank {rank} failed: {detail}")
        self.rank = rank


class WorkerGroup:
    """Spawns ranks 1..tp-1 (spawn context, daemonic) and watches them.

    The TCPStore is created here with port 0, so the OS picks a free port and rank 0 holds it from the
    start: no fixed port and no race between choosing a port and binding it.

    Attributes:
        store: the run's TCPStore (rank 0 is its server).
        worker_stats: ``{rank: recv_stats}``, the last control-plane samples each worker reported.
    """

    def __init__(self, config: EngineConfig, control: ControlPlane):
        self.config = config
        self.world_size = config.tensor_parallel_size
        self.store = TCPStore("127.0.0.1", 0, self.world_size, is_master=True, wait_for_workers=False,
                              timeout=timedelta(seconds=config.timeout_s))
        ctx = mp.get_context("spawn")
        self.reports = ctx.Queue()
        self.errors: dict[int, str] = {}
        self.worker_stats: dict[int, dict] = {}
        self.procs: dict[int, mp.Process] = {}
        for rank in range(1, self.world_size):
            p = ctx.Process(target=worker_main, name=f"tp-worker-{rank}", daemon=True,
                            args=(config, rank, control.endpoint(rank), self.store.port, self.reports))
            p.start()
            self.procs[rank] = p
        control.workers_started()

    def _drain(self, wait_s: float = 0.0) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                kind, rank, payload = self.reports.get(timeout=max(0.0, deadline - time.monotonic()) or 0.001)
            except queue.Empty:
                return
            (self.errors if kind == "error" else self.worker_stats)[rank] = payload
            if kind == "error":
                return

    def _dead(self) -> dict[int, int]:
        return {r: p.exitcode for r, p in self.procs.items() if not p.is_alive()}

    def check(self, wait_s: float = 0.0) -> None:
        """Raise :class:`WorkerError` if a worker reported an error or is no longer alive.

        ``wait_s``: how long to wait for a traceback from a worker that is still alive or exited on its
        own (a worker killed by a signal sends none, so that is not waited for) (s).
        """
        self._drain()
        dead = self._dead()
        if not self.errors:
            if any(code > 0 for code in dead.values()):  # exited on its own: its traceback may be in flight
                self._drain(max(wait_s, 0.5))
            elif wait_s and not dead:  # the caller saw a failure: a live worker may be about to report
                self._drain(wait_s)
                dead = self._dead()
        if self.errors:
            rank = min(self.errors)
            raise WorkerError(rank, "\n" + self.errors[rank])
        if dead:
            rank = min(dead)
            raise WorkerError(rank, f"process exited with code {dead[rank]}")

    def wait_for(self, stage: str, timeout_s: float | None = None) -> None:
        """Block until every worker has announced ``stage`` in the store, checking liveness.

        Raises:
            WorkerError: a worker died or failed first.
            TimeoutError: not all workers arrived within ``timeout_s`` (default: config.startup_timeout_s).
        """
        keys = [f"{stage}/{r}" for r in self.procs]
        deadline = time.monotonic() + (timeout_s or self.config.startup_timeout_s)
        while keys and not self.store.check(keys):
            self.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers did not reach stage {stage!r} within "
                                   f"{timeout_s or self.config.startup_timeout_s:.0f} s")
            time.sleep(POLL_S)

    def collect_stats(self) -> dict[int, dict]:
        """Wait (checking liveness, at most ``config.timeout_s``) until every worker has reported its
        control-plane samples after a REPORT_CONTROL_STATS message; returns and forgets them."""
        deadline = time.monotonic() + self.config.timeout_s
        while len(self.worker_stats) < len(self.procs):
            self.check()
            if time.monotonic() > deadline:
                raise TimeoutError("workers did not report their control-plane statistics in time")
            self._drain(POLL_S)
        stats, self.worker_stats = self.worker_stats, {}
        return stats

    def join(self, timeout_s: float = 5.0) -> None:
        """Wait up to ``timeout_s`` for the workers to exit (collecting their reports), then terminate and
        finally kill whatever is left. Idempotent."""
        deadline = time.monotonic() + timeout_s
        while any(p.is_alive() for p in self.procs.values()) and time.monotonic() < deadline:
            self._drain(POLL_S)
        for sig in ("terminate", "kill"):
            alive = [p for p in self.procs.values() if p.is_alive()]
            for p in alive:
                getattr(p, sig)()
            for p in alive:
                p.join(1.0)
        self._drain()
        for p in self.procs.values():
            p.join(0)
        self.reports.close()
        self.reports.join_thread()
