"""Rank 0's view of ranks 1..world_size-1, however they were started: the run's store, the lifelines, handing
out the control-plane ends, liveness, shutdown."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import queue
import signal
import socket
import sys
import time
from datetime import timedelta

from torch.distributed import TCPStore

from backends import ControlContext, ControlPlane
from backends.base import POLL_S, wait_until
from backends.segments import remove_stale_segments

from .launch import Launch, is_stopped, probe_nodes, start_ignoring_signals, torchrun_store
from .lifeline import STALL_S, LifelineServer
from .worker import INTERRUPTED, serve

PROGRESS_S = 15.0  # a start-up stage still waited for says so on stderr this often (a quarter of a shorter timeout)
RERAN_MAIN = 3  # exit code of a spawned process that found itself re-running its parent's main script
NO_MAIN_GUARD = ('it exited while starting: the script that created the LLM has no `if __name__ == "__main__":` '
                 "guard, so the spawned worker re-ran it (see docs/USAGE.md, the Python API)")


class WorkerError(RuntimeError):
    """A worker process failed; the message names the rank (and its node) and carries its traceback if sent."""

    def __init__(self, rank: int, detail: str):
        super().__init__(f"tensor-parallel {'rank 0 (this process)' if rank == 0 else f'worker rank {rank}'} failed: "
                         f"{detail}")
        self.rank = rank


class WorkerGroup:
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

    def node_name(self, rank: int) -> str:
        """The host ``rank`` said it runs on (rank 0's, a spawned worker's: this host, even before it said so)."""
        host = self.lifelines.hosts.get(rank) if self.lifelines else None
        here = rank == 0 or self.launch.launcher == "spawn"
        return host or (socket.gethostname() if here else "unknown: it never connected")

    def start(self, control: ControlPlane, body, body_args: tuple = ()) -> None:
        """Spawn the workers with their control-plane ends, or (torchrun) publish each under ``endpoint/<rank>``;
        then watch them from ``control``'s waits."""
        for rank in self.workers:
            end = control.endpoint(rank)
            if self.launch.launcher == "spawn":
                p = mp.get_context("spawn").Process(target=serve, name=f"tp-worker-{rank}", daemon=True, args=(
                    Launch(rank=rank, world_size=self.world_size), body, body_args, self.startup_timeout_s, end,
                    (self.store.port, self.lifelines.port)))
                start_ignoring_signals(p)
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

    def _drain(self, wait_s: float = 0.0) -> None:
        """Take every report the workers have sent; wait up to ``wait_s`` for one when there are none (0: never wait,
        as every liveness check does: it is on the send path of some planes). All of them: a rank's goodbye, which
        makes it dead, comes after its report, which another rank's can precede in the queue."""
        deadline, got = time.monotonic() + wait_s, False
        while True:
            left = deadline - time.monotonic()
            try:
                kind, rank, payload = self.lifelines.reports.get(block=not got and left > 0, timeout=max(left, 0))
            except queue.Empty:
                return
            {"error": self.errors, "interrupted": self.interrupted}.get(kind, self.worker_stats)[rank] = payload
            if kind == "interrupted" and payload == "SIGTERM" and self._same_node(rank, self.errors):
                self.after_failure.add(rank)
            got |= kind != "stats"

    def _dead(self) -> dict[int, str]:
        """Workers gone without a normal end (exit code 0 after a goodbye on the lifeline) or an interruption; their
        reports taken (a rank's report precedes its goodbye: one taken first could look silent, session 53)."""
        for rank in self.lifelines.dead.keys() & self.procs.keys():  # its lifeline closed as it died: the exit
            self.procs[rank].join(0.5)  # code, which names a signal, comes a moment later
        gone = {r: self._exit_reason(r, p.exitcode) for r, p in self.procs.items()
                if not p.is_alive() and not (self.lifelines.finished.get(r) == 0 and p.exitcode == 0)}
        ended = {r: f"it ended with exit code {code}" for r, code in self.lifelines.finished.items()
                 if code not in (0, INTERRUPTED)}  # an interrupted rank's report says more
        self._drain()
        return {**ended, **self.lifelines.dead, **gone}  # the process's own exit code, then the lifeline's word

    def _exit_reason(self, rank: int, code: int | None) -> str:
        """Why spawned ``rank`` is gone, from its exit code (:data:`RERAN_MAIN` before it connected: no main guard)."""
        if code == RERAN_MAIN and rank not in self.lifelines.connected():
            return NO_MAIN_GUARD
        if code is not None and code < 0:  # multiprocessing's code for a signal: -N
            with contextlib.suppress(ValueError):
                return f"process exited with code {code} ({signal.Signals(-code).name})"
        return f"process exited with code {code}"

    def check(self, wait_s: float = 0.0, stopped_with: str | None = None) -> None:
        """Raise :class:`WorkerError` if a worker reported an error, is gone or (after a failure) stalled, or
        ``KeyboardInterrupt`` if one was stopped by a signal (torchrun's ranks handle it).
        ``wait_s``: how long to wait for a traceback from a worker alive or exited on its own (s).
        ``stopped_with``: the signal torchrun's agent sent rank 0. A worker stopped by the same one is not named
        when no rank on rank 0's node failed first: the signal went to every rank, and the stop is rank 0's own."""
        self._drain()
        dead = self._dead()
        if not self.errors:
            own_exit = [r for r, p in self.procs.items() if not p.is_alive() and (p.exitcode or 0) > 0]
            if own_exit or (dead and not self.procs):  # its traceback may be in flight
                self._drain(max(wait_s, 0.5))
            elif wait_s and not dead and not self.interrupted:  # the caller saw a failure: a worker may report it
                self._drain(wait_s)
                dead = self._dead()
        recent = self.lifelines.recent_stalls(self.timeout_s + STALL_S) if self.errors or wait_s else {}
        # rank 0 stalled: the workers' timeouts (their errors) are its doing; a worker that died on its own is not
        if (self.errors or wait_s and not dead) and (own := recent.get(0)):
            raise WorkerError(0, f"stalled: no progress for {own:.1f} s (stopped, or stuck holding the GIL): the "
                                 f"workers' collectives and waits timed out meanwhile")
        # a worker resumed just after its partners timed out (its own wait then timed out too): its stall explains them
        stalled = self._stalled(dead, self.errors and wait_s) or {
            r: s for r, s in recent.items() if r and s > self.timeout_s - STALL_S}
        if stalled and (self.errors or dead or wait_s):  # a healthy rank's timeout is the stalled one's doing
            rank = max(stalled, key=stalled.get)
            raise WorkerError(rank, f"stalled: no sign of life for {stalled[rank]:.1f} s (stopped, or stuck "
                                    f"holding the GIL) (node {self.node_name(rank)})")
        # a stop signal to a worker breaks its partners' collectives (their errors); torchrun's agent sends SIGTERM
        # to a node's ranks after one failed or died there: that one's error or death is the cause
        silent = self._silent_deaths(dead) if self.errors or set(self.interrupted.values()) == {"SIGTERM"} else []
        stopped = [r for r, sig in self.interrupted.items()
                   if sig != "SIGTERM" or not (r in self.after_failure or self._same_node(r, silent))]
        if stopped and not silent:
            rank = stopped[0]  # the first to report: the others' stops may follow from it
            if self.interrupted[rank] == stopped_with and not self._failed_beside_rank0(wait_s):
                return
            raise KeyboardInterrupt(f"{self.interrupted[rank]} on rank {rank}, node {self.node_name(rank)}")
        if self.errors and not silent:
            rank = next(iter(self.errors))  # the first to report: a failed rank's exit breaks its partners' collectives
            raise WorkerError(rank, f"(on {self.node_name(rank)})\n" + self.errors[rank])
        if dead:
            rank = min(silent or dead)
            where = "" if dead[rank] == NO_MAIN_GUARD else f" (node {self.node_name(rank)})"  # it never connected
            raise WorkerError(rank, dead[rank] + where)

    def _failed_beside_rank0(self, wait_s: float) -> bool:
        """Whether a worker on rank 0's node failed or died other than by a stop signal (then torchrun's agent
        stopped rank 0 for it), waiting up to ``wait_s`` for each of them to report or end."""
        beside = [r for r in self.workers if self.node_name(r) == self.node_name(0)]
        deadline = time.monotonic() + wait_s
        while True:
            dead = self._dead()
            if any(r in self.errors or (r in dead and r not in self.interrupted) for r in beside):
                return True
            if all(r in self.interrupted for r in beside) or time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)
            self._drain()

    def _same_node(self, rank: int, ranks) -> bool:
        """Whether one of ``ranks`` other than ``rank`` runs on ``rank``'s node."""
        return any(r != rank and self.node_name(r) == self.node_name(rank) for r in ranks)

    def _silent_deaths(self, dead: dict[int, str]) -> list[int]:
        """Ranks in ``dead`` killed by a signal, without a report (updates ``dead``): their partners' broken
        collectives' errors, or torchrun's SIGTERM to their node, can come first, within ~0.5 s of their death."""
        deadline = time.monotonic() + 0.5
        while True:
            silent = [r for r in dead if r not in self.errors and r not in self.interrupted
                      and r not in self.lifelines.finished  # its goodbye: it ended on its own, its report cut short
                      and (r not in self.procs or (self.procs[r].exitcode or 0) < 0)]  # torchrun: its lifeline closed
            if silent or set(self.interrupted.values()) - {"SIGTERM"} or time.monotonic() >= deadline:
                return silent
            time.sleep(POLL_S)
            self._drain()
            dead.update(self._dead())

    def _stalled(self, dead: dict, settle: bool) -> dict[int, float]:
        """Live ranks silent on their lifeline. ``settle``: a worker reported an error, perhaps a collective that
        timed out on the stalled rank: give the stall up to ``STALL_S`` to show before the reporter is blamed."""
        deadline = time.monotonic() + (STALL_S if settle else 0)
        while True:
            stalled = {r: age for r, age in self.lifelines.stalled().items() if r not in dead}
            if stalled or time.monotonic() >= deadline:
                return stalled
            time.sleep(POLL_S)

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
