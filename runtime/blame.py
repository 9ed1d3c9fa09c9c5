"""Whom rank 0 blames when a run breaks: its workers' reports on their lifelines, their exits, their silences and
(torchrun) their nodes, read together (``WorkerGroup.check``, the liveness check every wait runs)."""

from __future__ import annotations

import contextlib
import queue
import signal
import socket
import time

from backends.base import POLL_S

from .lifeline import STALL_S
from .worker import INTERRUPTED

RERAN_MAIN = 3  # exit code of a spawned process that found itself re-running its parent's main script
NO_MAIN_GUARD = ('it exited while starting: the script that created the LLM has no `if __name__ == "__main__":` '
                 "guard, so the spawned worker re-ran it (see docs/USAGE.md, the Python API)")


class WorkerError(RuntimeError):
    """A worker process failed; the message names the rank (and its node) and carries its traceback if sent."""

    def __init__(self, rank: int, detail: str):
        super().__init__(f"tensor-parallel {'rank 0 (this process)' if rank == 0 else f'worker rank {rank}'} failed: "
                         f"{detail}")
        self.rank = rank


class Blame:
    """``WorkerGroup``'s reading of its workers (its ``lifelines``, ``procs``, ``workers``, ``launch`` and
    ``timeout_s``): ``errors``, ``interrupted`` and ``after_failure`` fill from the reports; ``check`` raises the
    failure that explains the others."""

    def node_name(self, rank: int) -> str:
        """The host ``rank`` said it runs on (rank 0's, a spawned worker's: this host, even before it said so)."""
        host = self.lifelines.hosts.get(rank) if self.lifelines else None
        here = rank == 0 or self.launch.launcher == "spawn"
        return host or (socket.gethostname() if here else "unknown: it never connected")

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
        dead = self._dead()  # the reports too
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
