"""A worker process (ranks 1..tp-1), for both launchers: join the run (store, lifeline, under torchrun the node
probe and its control-plane end), then run a body, which runs rank 0's commands in ``command_loop``."""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import json
import multiprocessing as mp
import pickle
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta

from torch.distributed import TCPStore

from backends import EXIT, PeerGone, WorkerEndpoint
from backends.segments import exited, remove_segments_of
from common import ConfigError

from .launch import SHIELDED, Launch, probe_nodes, torchrun_store, wait_get
from .lifeline import Lifeline, watch_parent

REPORT = "report_control_stats"  # rank 0 asks every worker for its control-plane samples
REFUSED = 2  # exit code of a worker told by rank 0 that the run will not start (bad input)
INTERRUPTED = 130  # exit code of a worker stopped by a signal (torchrun's ranks take Ctrl-C and SIGTERM)
OPENED = "opened"  # start-up stage: the worker holds its end of the plane (rank 0 may unlink the plane's names)


@dataclass
class Joined:
    """What a worker's body gets once it has joined the run (its endpoint open; rank 0's node is 0)."""

    rank: int
    store: object
    endpoint: WorkerEndpoint
    lifeline: Lifeline
    node_of: list[int]


def agreement(body, agree: dict | None) -> str:
    """What a rank started by torchrun publishes for rank 0 to compare with its own (``Cluster.start``): the body's
    name and ``agree``, the settings its caller needs alike on every rank, as JSON."""
    return json.dumps({"body": body.__name__, **(agree or {})}, sort_keys=True, default=str)


def serve(launch: Launch, body, body_args: tuple, startup_timeout_s: float, endpoint: WorkerEndpoint | None = None,
          ports: tuple[int, int] = (0, 0), agree: dict | None = None) -> int:
    """Join the run as rank ``launch.rank`` (spawned: with ``endpoint`` and the store's and lifeline's ``ports`` on
    loopback; torchrun: through its store, publishing ``agreement(body, agree)``, which rank 0 may refuse), then run
    ``body(Joined(...), *body_args)``. Returns the exit code
    (spawned workers exit with it): the body's, 1 when anything raised (the traceback goes to rank 0 on the
    lifeline), ``REFUSED`` when rank 0 refused the run, ``INTERRUPTED`` after a ``KeyboardInterrupt``."""
    spawned = launch.launcher == "spawn"
    if spawned:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is rank 0's to handle; it stops the workers
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1`: stacks to stderr, and go on
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SHIELDED)  # blocked since the spawn (launch.start_shielded)
        _resume_on_parent_death()
        watch_parent(on_death=_remove_dead_drivers_segments)
    rank, timeout_s, lifeline, code = launch.rank, startup_timeout_s, None, 1
    try:
        if spawned:
            store = TCPStore("127.0.0.1", ports[0], launch.world_size, is_master=False,
                             timeout=timedelta(seconds=timeout_s))
            host, port = "127.0.0.1", ports[1]
        else:
            store = torchrun_store(launch, timeout_s)
            store.set(f"agree/{rank}", agreement(body, agree))
            address, driver = (v.decode() for v in wait_get(store, ["lifeline", "driver"], timeout_s))
            host, port = address.rsplit(":", 1)
        lifeline = Lifeline(host, int(port), rank, timeout_s)
        lifeline.watch(on_death=_remove_dead_drivers_segments if spawned else _on_driver_death(rank, driver))
        node_of = [0] * launch.world_size
        if not spawned:
            node_of = probe_nodes(store, rank, launch.world_size, timeout_s)
            try:
                endpoint = pickle.loads(wait_get(store, [f"endpoint/{rank}"], timeout_s, lambda: _refused(store))[0])
            except ConfigError as e:
                print(f"error: {e}", file=sys.stderr)
                code = REFUSED  # the goodbye on the lifeline carries the code the process exits with
                return code
        parent = mp.parent_process()

        def driver_alive() -> None:
            if parent is not None and not parent.is_alive():
                raise PeerGone(f"rank {rank}: the driver (rank 0) exited")

        endpoint.liveness_check = driver_alive
        store.set(f"opening/{rank}", "1")  # a start-up stage: rank 0's notes name who has not got here
        endpoint.open(store)
        store.set(f"{OPENED}/{rank}", "1")
        try:
            code = body(Joined(rank, store, endpoint, lifeline, node_of), *body_args)
        finally:
            endpoint.close()
    except BaseException as e:
        code = _report(lifeline, e)
    finally:
        if lifeline is not None:
            lifeline.close(code)
    if spawned:
        sys.exit(code)
    return code


def _report(lifeline: Lifeline | None, e: BaseException) -> int:
    """(In an ``except`` block) Tell rank 0 why this worker ends: its traceback, or (torchrun's ranks take stop
    signals) an interruption; nothing after rank 0's end (PeerGone). Returns the exit code."""
    if isinstance(e, PeerGone):
        return 1
    interrupted = isinstance(e, KeyboardInterrupt)
    report = ("interrupted", e.args[0] if e.args else "SIGINT") if interrupted else ("error", traceback.format_exc())
    if lifeline is not None:
        with contextlib.suppress(OSError):
            lifeline.send(*report)
    elif not interrupted:
        traceback.print_exc()
    return INTERRUPTED if interrupted else 1


def command_loop(endpoint: WorkerEndpoint, lifeline: Lifeline, handle, report=dict) -> int:
    """Rank 0's commands until EXIT (returns 0). ``REPORT`` sends rank 0 this worker's control-plane samples
    since the last (not its own) and ``report()``'s entries; any other goes to ``handle(method, args)``."""
    while True:
        method, args = endpoint.recv()
        if method == EXIT:
            return 0
        if method == REPORT:
            lifeline.send("stats", {**endpoint.take_recv_stats().drop_last().as_dict(), **report()})
        else:
            handle(method, args)


def _resume_on_parent_death() -> None:
    """Linux: SIGCONT to this process when rank 0 dies (PR_SET_PDEATHSIG), so that a stopped worker runs its parent
    watch (a stopped process runs no thread): it removes rank 0's segments and ends. Harmless to a running one."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGCONT)  # 1: PR_SET_PDEATHSIG


def _remove_dead_drivers_segments() -> None:
    """Unlink a dead spawning rank 0's segments and semaphores (no resource tracker does); nothing while it lives."""
    parent = mp.parent_process()
    if parent is not None and not parent.is_alive():
        remove_segments_of(parent.pid)


def _on_driver_death(rank: int, driver: str):
    """(torchrun) What this worker does when rank 0's end of the lifeline closes: say so (torchrun's summary gives
    only exit codes), and unlink rank 0's segments once it has exited, when it ran on this host. ``driver``: rank
    0's "<hostname> <pid>"."""
    host, pid = driver.rsplit(" ", 1)

    def on_death() -> None:
        print(f"error: rank {rank}: rank 0 is gone (its lifeline closed), so this rank exits", file=sys.stderr)
        if host != socket.gethostname():  # its segments are on its own host
            return
        deadline = time.monotonic() + 2.0  # its sockets close before its exit is done
        while time.monotonic() < deadline:
            if exited(int(pid)):
                remove_segments_of(int(pid))
                return
            time.sleep(0.02)
    return on_death


def _refused(store) -> None:
    """(torchrun) Raises ConfigError, with rank 0's line, when rank 0 refused the run."""
    if store.check(["abort"]):
        raise ConfigError(store.get("abort").decode())
