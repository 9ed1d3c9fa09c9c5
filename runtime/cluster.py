"""Rank 0's side of a run, whatever the workers' body (the engine's model workers, ``workload=broadcast``'s):
build the control plane for where the ranks run, start the body on every other rank, send it commands, name
the rank behind a failure, collect the control-plane statistics and close. The workers' side is
``worker.py`` (``worker_entry`` runs the body, which runs ``command_loop``)."""

from __future__ import annotations

from backends import ControlPlaneError

from .launch import Launch
from .worker import REPORT
from .worker_group import WorkerGroup


class DataPlaneError(RuntimeError):
    """A data-plane collective failed or timed out on rank 0 while every worker was still alive."""


class Cluster:
    """Rank 0 and ranks 1..world_size-1 (spawned by :meth:`start`, or started by torchrun: ``launch``) with
    the control plane ``make_plane(context)`` builds for where they run (``WorkerGroup.context``);
    ``teardown()``: rank 0's part of the body, undone at :meth:`close` (after the exit message).

    Attributes:
        group: the :class:`WorkerGroup`; control: the control plane; check: ``group.check``.
    Raises:
        ValueError: ``make_plane`` refused; torchrun's waiting ranks are told, and exit with code 2.
        TimeoutError / WorkerError: (torchrun) the ranks did not all connect, or one failed.
    """

    def __init__(self, world_size: int, timeout_s: float, startup_timeout_s: float, launch: Launch | None,
                 make_plane, teardown=None):
        self.control, self.teardown = None, teardown
        self.group = WorkerGroup(world_size, timeout_s, startup_timeout_s, launch)
        self.check = self.group.check
        try:
            self.control = make_plane(self.group.context)
        except BaseException as e:
            if isinstance(e, ValueError):
                self.group.refuse(str(e))
            self.close(grace_s=0.5)  # refused ranks need a moment to read why
            raise

    def start(self, body, body_args: tuple = ()) -> None:
        """Run ``body(joined, *body_args)`` on every worker (``worker.worker_entry``) and wait until they have
        joined the control plane.

        Raises:
            WorkerError / TimeoutError / ControlPlaneError: a worker failed or did not join in time.
        """
        self.group.start(self.control, body, body_args)

    def send(self, method: str, *args) -> None:
        """Broadcast ``method(*args)`` to every worker.

        Raises:
            WorkerError: a worker failed (its traceback in the message), which explains a failed send.
            ControlPlaneError: the send failed and no worker reported why.
        """
        try:
            self.control.send(method, *args)
        except ControlPlaneError:
            self.check(wait_s=2.0)  # a worker that died reported why first: raise that
            raise

    def explain(self, error: BaseException, collective: str | None, wait_s: float = 2.0) -> None:
        """After ``error`` on rank 0: raise the failure of a worker that died, failed or stalled (waiting up to
        ``wait_s`` for its report); else, when ``error`` is a failed ``collective`` (its description), a
        :class:`DataPlaneError`; else return, for the caller to raise ``error``."""
        self.check(wait_s=wait_s)
        if collective is not None:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise DataPlaneError(f"{collective} failed on rank 0 and no worker reported an error (a worker may be "
                                 f"stalled): {first}") from error

    def collect_stats(self) -> dict:
        """Control-plane samples since the last collection, then start afresh on every rank:
        ``{"send": {"nbytes": [...], "ns": [...]}, "recv": {rank: {"nbytes": [...], "ns": [...], ...}}}`` with
        rank 0's send cost and each worker's one-way latency per message (ns), and what the body's ``report``
        adds (``worker.command_loop``). The collection message itself is in neither.

        Raises:
            WorkerError / TimeoutError: a worker failed or did not answer.
        """
        send = self.control.take_send_stats()
        self.send(REPORT)
        self.control.take_send_stats()  # the report message
        return {"send": send.as_dict(), "recv": self.group.collect_stats()}

    def close(self, grace_s: float = 5.0) -> None:
        """Stop the workers: the exit message, then ``teardown()``, then wait up to ``grace_s`` for them to end
        (those left are terminated, then killed) and free the plane's segments and sockets, whatever
        ``teardown`` raised."""
        try:
            if self.control is not None:
                self.control.timeout_s = min(self.control.timeout_s, 5.0)  # a stalled worker must not hold us
                self.control.send_exit()
            if self.teardown is not None:
                self.teardown()
        finally:
            self.group.join(timeout_s=grace_s)
            if self.control is not None:
                self.control.close()
