"""Rank 0's side of a run, whatever the workers' body: control plane, workers, commands, blame, statistics."""

from __future__ import annotations

import contextlib
import json

from backends import ControlContext, ControlPlaneError, get_control_plane, planes_for, scope_fits
from common import ConfigError, first_line

from .launch import Launch, wait_get
from .worker import OPENED, REPORT, agreement
from .worker_group import WorkerGroup


class DataPlaneError(RuntimeError):
    """A data-plane collective failed or timed out on rank 0 while every worker was still alive."""


def make_control_plane(name: str, options: dict, world_size: int, timeout_s: float, context: ControlContext):
    """The control plane ``name`` with ``options`` for ranks placed as ``context`` says. Raises ConfigError: a bad
    option, or the plane cannot work there (``scope_fits``; one line naming those that can)."""
    try:
        cls = get_control_plane(name)
        if unknown := set(options) - set(cls.option_names()):
            raise ValueError(f"control={name} has no option {', '.join(sorted(unknown))}; its options: "
                             f"{', '.join(sorted(cls.option_names())) or 'none'}")
        scope = cls.scope_of(options)
        if scope_fits(scope, context.launcher, context.num_nodes):
            return cls(world_size, timeout_s=timeout_s, context=context, **options)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    where = f"ranks on {context.num_nodes} nodes" if context.num_nodes > 1 else "ranks started by torchrun"
    can = planes_for(context.launcher, context.num_nodes)
    inner = (f"; or control={name} control.options.inner={'|'.join(c for c in can if c != name)}"
             if "inner" in options else "")
    raise ConfigError(f"control={name} cannot reach {where} (scope: {scope}); planes that can: "
                      f"{', '.join(can)}{inner}")


class Cluster:
    """Rank 0 and ranks 1..world_size-1 (spawned, or started by torchrun: ``launch``) over the plane ``control``;
    ``teardown()``: rank 0's part of the body, for :meth:`close`. Raises ConfigError (torchrun's waiting ranks
    are told; they exit with code 2), TimeoutError / WorkerError (a rank failed)."""

    def __init__(self, world_size: int, timeout_s: float, startup_timeout_s: float, launch: Launch | None,
                 control: str, options: dict, teardown=None):
        self.control, self.teardown = None, teardown
        self.group = WorkerGroup(world_size, timeout_s, startup_timeout_s, launch)
        self.check = self.group.check
        try:
            self.control = make_control_plane(control, options, world_size, timeout_s, self.group.context)
        except BaseException as e:
            if isinstance(e, ConfigError) and self.group.launch.launcher == "torchrun":
                self.group.store.set("abort", str(e))  # the waiting ranks print it and exit with code 2
            self.close(grace_s=0.5)  # refused ranks need a moment to read why
            raise

    def start(self, body, body_args: tuple = (), agree: dict | None = None) -> None:
        """Run ``body(joined, *body_args)`` on every worker; wait until they have joined the plane. Under torchrun
        each rank started its own body with its own settings: one that differs from rank 0's (``agree``) is refused.
        Raises ConfigError (the waiting ranks are told; they exit with code 2)."""
        if self.group.launch.launcher == "torchrun":
            self._agree(body, agree)
        self.group.start(self.control, body, body_args)

    def _agree(self, body, agree: dict | None) -> None:
        """(torchrun) Raises ConfigError naming the first rank whose body or settings differ from rank 0's."""
        mine, store = json.loads(agreement(body, agree)), self.group.store
        texts = wait_get(store, [f"agree/{r}" for r in self.group.workers], self.group.startup_timeout_s, self.check)
        for rank, text in zip(self.group.workers, texts, strict=True):
            theirs = json.loads(text)
            differ = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
            if differ := ["body"] if "body" in differ else differ:  # another body: its settings are no comparison
                said = "; ".join(f"{k}={theirs.get(k)!r} (rank 0: {mine.get(k)!r})" for k in differ[:3])
                more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
                problem = (f"rank {rank} (node {self.group.node_name(rank)}) was started with other settings than "
                           f"rank 0: {said}{more}; start every node with the same command")
                store.set("abort", problem)
                raise ConfigError(problem)

    def send(self, method: str, *args) -> None:
        """Broadcast ``method(*args)``; a failed send raises the failure of a worker that explains it, if any."""
        try:
            self.control.send(method, *args)
        except ControlPlaneError:
            self.check(wait_s=2.0)  # a worker that died reported why: raise that
            raise

    def explain(self, error: BaseException, collective: str | None, wait_s: float = 2.0) -> None:
        """After ``error`` on rank 0, raise the failure of a worker that died, failed or stalled (waiting up to
        ``wait_s`` for its report), else a :class:`DataPlaneError` when ``collective`` names what failed."""
        self.check(wait_s=wait_s)
        if collective is not None:
            raise DataPlaneError(f"{collective} failed on rank 0 and no worker reported an error (a worker may be "
                                 f"stalled): {first_line(error) or type(error).__name__}") from error

    def collect_stats(self) -> dict:
        """Every rank's control-plane samples since the last call (without its message), then afresh: ``{"send":
        {"nbytes", "ns"}, "recv": {rank: {"nbytes", "ns", and what the body's report adds}}, "silent_s": {rank:
        longest silence on its lifeline over STALL_S}}`` (bytes, ns, s)."""
        send = self.control.take_send_stats()
        self.send(REPORT)
        self.control.take_send_stats()  # the report message
        recv = self.group.collect_stats()
        return {"send": send.as_dict(), "recv": recv, "silent_s": self.group.lifelines.take_silences()}

    def _all_opened(self) -> bool:
        """Whether every worker has announced OPENED (False when the store cannot tell)."""
        with contextlib.suppress(Exception):
            return not self.group.late(OPENED)
        return False

    def describe(self) -> dict:
        """``launcher``, ``nodes``, and the one-way latencies' ``clock_sync`` and ``clock_uncertainty_us``."""
        g = self.group
        where = {"launcher": g.launch.launcher, "nodes": g.context.num_nodes}
        if not g.workers:  # tp=1: no one-way latency to put on a clock
            return where
        if g.launch.launcher == "spawn" or g.context.num_nodes == 1:
            return {**where, "clock_sync": "same host clock", "clock_uncertainty_us": 0.0}
        uncertainty_us = max(g.lifelines.offsets[r][1] for r in g.workers if g.context.node_of[r]) / 1e3
        return {**where, "clock_sync": "ping-pong min-RTT/2", "clock_uncertainty_us": uncertainty_us}

    def close(self, grace_s: float = 5.0, exit_wait_s: float = 5.0) -> None:
        """The exit message (a send waits at most ``exit_wait_s``) and the plane's names unlinked, ``teardown()``, then
        (whatever it raised) up to ``grace_s`` for the workers to end (those left are terminated, then killed); free
        the plane's segments and sockets."""
        try:
            if self.control is not None:
                self.group.kill_stalled()
                self.control.timeout_s = min(self.control.timeout_s, exit_wait_s)  # a stalled worker must not hold us
                try:
                    self.control.send_exit()
                except KeyboardInterrupt:  # a stop signal here, or a worker's interruption met again: said already
                    if not self.group.interrupted:
                        raise
                finally:  # the workers are leaving: a rank 0 killed while it waits for them leaves no segment
                    if self._all_opened():  # else one still opening by name would fail
                        self.control.unlink()
            if self.teardown is not None:
                with contextlib.suppress(Exception):
                    self.teardown()
        finally:
            self.group.join(timeout_s=grace_s)
            if self.control is not None:
                self.control.close()
