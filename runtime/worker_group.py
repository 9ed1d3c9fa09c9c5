"""Rank 0's view of ranks 1..world_size-1, however they were started: the run's store, the lifelines, handing
out the control-plane ends, start-up waits, shutdown (whom to blame when one fails: ``blame.py``)."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import socket
import sys
import time
from datetime import timedelta

from torch.distributed import TCPStore

from backends import ControlContext, ControlPlane
from backends.base import POLL_S, wait_until
from backends.segments import remove_stale_segments

from .blame import RERAN_MAIN, Blame, WorkerError
from .launch import Launch, is_stopped, probe_nodes, start_shielded, torchrun_store
from .lifeline import STALL_S, LifelineServer
from .worker import serve

PROGRESS_S = 15.0  # a start-up stage still waited for says so on stderr this often (a quarter of a shorter timeout)


class WorkerGroup(Blame):
    """Rank 0's side of a run's ``world_size`` ranks. ``timeout_s`` / ``startup_timeout_s``: longest wait on a
    running / starting worker (s); ``launch``: how the ranks were started (None: spawn them here). Raises
    TimeoutError: (torchrun) not all connected in time; WorkerError: a worker died or failed while starting."""

    def __init__(self, world_size: int, timeout_s: float, startup_timeout_s: float, launch: Launch | None = None):
        # A spawned process re-running a main script without the ``__main__`` guard: leave quietly, rank 0 says why
        if getattr(mp.current_process(), "_inheriting", False):
            raise SystemExit(RERAN_MAIN)
        self.world_size, self.timeout_s, self.startup_timeout_s = world_size, timeout_s, startup_timeout_s
        self.launch = launch or Launch(world_size=world_size)
        self.errors: dict[int, str] = {}
        self.interrupted: dict[int, str] = {}  # (torchrun) rank -> the stop signal that ended it, in arrival order
        self.after_failure: set[int] = set()  # ranks SIGTERMed once a rank of their node had failed: torchrun's doing
        self.worker_stats: dict[int, dict] = {}
        self.procs: dict[int, mp.Process] = {}
        self.store = self.lifelines = None
        self.workers = list(range(1, world_size))
        remove_stale_segments()  # what runs killed with every process left behind (segments, semaphores)
        try:
            if self.launch.launcher == "spawn":
                self.store = TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False,
                                      timeout=timedelta(seconds=timeout_s))  # a port the OS picks, held from the start
                self.lifelines = LifelineServer("127.0.0.1", sync_clocks=False)
                node_of, host = [0] * world_size, "127.0.0.1"
            else:
                self.store = torchrun_store(self.launch, startup_timeout_s)
                self.lifelines = LifelineServer("0.0.0.0", sync_clocks=True)
                host = self.launch.master_addr
                self.store.set("driver", f"{socket.gethostname()} {os.getpid()}")  # whose segments a worker unlinks
                self.store.set("lifeline", f"{host}:{self.lifelines.port}")
                self.wait_for("lifeline", lambda: sorted(set(self.workers) - self.lifelines.connected()))
                node_of = probe_nodes(self.store, 0, world_size, startup_timeout_s, self.check)
            self.context = ControlContext(self.store, host, tuple(node_of), self.launch.launcher, startup_timeout_s)
        except BaseException:
            self.join(0)
            raise

    def start(self, control: ControlPlane, body, body_args: tuple = ()) -> None:
        """Spawn the workers with their control-plane ends, or (torchrun) publish each under ``endpoint/<rank>``;
        then watch them from ``control``'s waits."""
        for rank in self.workers:
            end = control.endpoint(rank)
            if self.launch.launcher == "spawn":
                p = mp.get_context("spawn").Process(target=serve, name=f"tp-worker-{rank}", daemon=True, args=(
                    Launch(rank=rank, world_size=self.world_size), body, body_args, self.startup_timeout_s, end,
                    (self.store.port, self.lifelines.port)))
                start_shielded(p)
                self.procs[rank] = p
                continue
            if self.context.node_of[rank] != 0:
                end.clock_offset_ns = self.lifelines.offsets[rank][0]
            self.store.set(f"endpoint/{rank}", pickle.dumps(end, protocol=pickle.HIGHEST_PROTOCOL))
        if control.join_holds_gil:  # no liveness check runs during its join: one that waits names the late ranks
            self.wait_for("opening")
        control.workers_started()
        control.liveness_check = self.check
        control.wait_ready()

    def late(self, stage: str) -> list[int]:
        """The workers that have not announced start-up ``stage`` in the store yet."""
        return [r for r in self.workers if not self.store.check([f"{stage}/{r}"])]

    def wait_for(self, stage: str, missing=None) -> None:
        """Block until every worker has announced ``stage`` in the store (or ``missing()``, the ranks not there
        yet, is empty), checking liveness and saying every PROGRESS_S who is late. Raises WorkerError: a worker
        died or failed first, or its process stayed stopped for ``timeout_s``; TimeoutError: not within
        ``startup_timeout_s``."""
        missing = missing or (lambda: self.late(stage))
        start = said = last = time.monotonic()
        stopped_since: dict[int, float] = {}
        self.lifelines.quiet = True  # the notes below name the stage too
        try:
            while late := missing():
                self.check()
                now = time.monotonic()
                if now - last > STALL_S:  # this process did not run: its own pause is no worker's lateness
                    start, said = start + now - last, now
                    print(f"note: rank 0 did not run for {now - last:.0f} s at start-up stage {stage!r} (stopped, or "
                          f"stuck holding the GIL): the start-up wait does not count it", file=sys.stderr, flush=True)
                last = now
                stopped_since = {r: stopped_since.get(r, now) for r in late if is_stopped(self.procs.get(r))}
                if (rank := next((r for r, t in stopped_since.items() if now - t > self.timeout_s), None)) is not None:
                    raise WorkerError(rank, f"stalled: its process is stopped, for {now - stopped_since[rank]:.1f} s "
                                            f"before start-up stage {stage!r} (node {self.node_name(rank)})")
                if now > start + self.startup_timeout_s:
                    raise TimeoutError(f"rank(s) {', '.join(map(str, late))} did not reach start-up stage "
                                       f"{stage!r} within {self.startup_timeout_s:g} s"
                                       + self._waiting(stage, late, now - start).partition(f"{stage!r}")[2])
                if now - said >= min(PROGRESS_S, self.startup_timeout_s / 4):
                    said = now
                    print(self._waiting(stage, late, now - start), file=sys.stderr, flush=True)
                time.sleep(POLL_S)
        finally:
            self.lifelines.quiet = False

    def _waiting(self, stage: str, missing: list[int], waited_s: float) -> str:
        """One line: the ranks ``missing`` at ``stage`` after ``waited_s``, and which of them are silent."""
        stalled = self.lifelines.stalled()
        silent = "; ".join(f"rank {r} silent for {stalled[r]:.0f} s (stopped?)" for r in missing if r in stalled)
        never = [f"{r}{' (its process is stopped)' * is_stopped(self.procs.get(r))}" for r in missing
                 if r not in self.lifelines.connected()]  # a spawned one's state says it, its lifeline cannot
        blind = " (one that ended first cannot say so: see its node's log)" if self.launch.launcher != "spawn" else ""
        return (f"note: waiting {waited_s:.0f} s (of {self.startup_timeout_s:g}) for rank(s) "
                f"{', '.join(map(str, missing))} to reach start-up stage {stage!r}" + (f"; {silent}" if silent else "")
                + (f"; never connected: rank(s) {', '.join(never)}{blind}" if never else ""))

    def collect_stats(self) -> dict[int, dict]:
        """Every worker's control-plane samples (after ``worker.REPORT``), then forgets them. Raises TimeoutError:
        not all within ``timeout_s``; WorkerError: a worker failed."""
        wait_until(lambda t: len(self.worker_stats) >= len(self.workers) or self._drain(t), self.check, self.timeout_s,
                   lambda: TimeoutError("workers did not report their control-plane statistics in time"))
        stats, self.worker_stats = self.worker_stats, {}
        return stats

    def kill_stalled(self) -> None:
        """Kill the spawned workers silent on their lifelines or stopped (one stopped before it connected): only a
        kill ends a stopped process, which takes no exit message (gloo's send would wait its timeout)."""
        stalled = self.lifelines.stalled() if self.lifelines is not None else {}
        for rank, p in self.procs.items():
            if p.is_alive() and (rank in stalled or is_stopped(p)):
                p.kill()

    def join(self, timeout_s: float = 5.0) -> None:
        """Wait up to ``timeout_s`` for the workers to end, then terminate and finally kill spawned ones left;
        close the lifelines. Idempotent."""
        deadline = time.monotonic() + timeout_s
        self.kill_stalled()
        if self.lifelines is not None:
            while (self.lifelines.conns or any(p.is_alive() for p in self.procs.values())) \
                    and time.monotonic() < deadline:
                time.sleep(POLL_S)
        for sig in ("terminate", "kill"):
            alive = [p for p in self.procs.values() if p.is_alive()]
            for p in alive:
                getattr(p, sig)()
            for p in alive:
                p.join(1.0)
        for p in self.procs.values():
            p.join(0)
        if self.lifelines is not None:
            self.lifelines.close()
