"""How the ranks of a run come to exist, and where they are. ``spawn`` (one host): rank 0 hosts a TCPStore on a
port the OS picks and spawns ranks 1..tp-1. ``torchrun``: its agent starts every rank (``TORCHRUN_VARS`` set); the
store comes from the ``env://`` rendezvous, a run's keys under a namespace of their own. The agent
(``--max-restarts=0``) stops its node's processes when one fails; the lifelines cover other nodes and rank 0."""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import signal
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing import resource_tracker

import torch.distributed as dist
from torch.distributed import PrefixStore, Store

from backends.base import wait_until
from backends.segments import create_segment, open_segment, release_segment
from common import ConfigError

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class Launch:
    """Where this process stands, as torchrun's variables say (``run_id`` namespaces the store keys)."""

    launcher: str = "spawn"
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    master_addr: str = "127.0.0.1"
    run_id: str = ""

    @classmethod
    def from_env(cls) -> Launch | None:
        """The torchrun launch described by the environment, or None when torchrun's variables are not set. Raises
        ConfigError: a rank's identity (RANK, WORLD_SIZE or LOCAL_RANK) set without the rest, as a launcher that
        forgot one leaves it (each process would run alone), or a count that is not an integer >= 0."""
        env = os.environ
        if not all(env.get(v) for v in TORCHRUN_VARS):
            if any(env.get(v) for v in TORCHRUN_VARS[:3]):
                missing = ", ".join(v for v in TORCHRUN_VARS if not env.get(v))
                raise ConfigError(f"{missing} not set where RANK, WORLD_SIZE or LOCAL_RANK is: start the ranks with "
                                  f"torchrun, which sets all of {', '.join(TORCHRUN_VARS)}, or unset them to spawn")
            return None
        names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
        values = [env.get(v, env["WORLD_SIZE"]) for v in names]
        if bad := next((f"{n}={v!r}" for n, v in zip(names, values, strict=True) if not v.isdigit()), None):
            raise ConfigError(f"{bad}: torchrun's variables are integers >= 0")
        return cls("torchrun", *map(int, values), env["MASTER_ADDR"], env.get("TORCHELASTIC_RUN_ID", "none"))


_runs_in_process = 0  # engines started in this process: every rank of a sweep counts the same way


def torchrun_store(launch: Launch, timeout_s: float) -> Store:
    """The env:// rendezvous store, under a namespace of this run and of this engine (one per job of a sweep).
    Raises TimeoutError: (rank > 0) the store took no connection within ``timeout_s``."""
    global _runs_in_process
    _runs_in_process += 1
    left = timeout_s if launch.rank == 0 else _reach_store(launch.master_addr, timeout_s)
    store, _, _ = next(dist.rendezvous("env://", timeout=timedelta(seconds=left)))
    return PrefixStore(f"tpcp/{launch.run_id}/{_runs_in_process}", store)


def _reach_store(addr: str, timeout_s: float) -> float:
    """Seconds left of ``timeout_s`` once MASTER_PORT on ``addr`` takes connections. Torch's own client retries
    once, so with rank 0's node gone a rank waited twice ``llm.startup_timeout_s`` and printed a C++ trace per try
    (session 53). Raises TimeoutError."""
    port, deadline = int(os.environ["MASTER_PORT"]), time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(OSError), socket.create_connection((addr, port), timeout=1.0):
            return max(deadline - time.monotonic(), 1.0)
        if time.monotonic() >= deadline:
            raise TimeoutError(f"the run's store at {addr}:{port} took no connection for {timeout_s:g} s (is rank "
                               f"0's node running, with the same --master-addr and --master-port?)")
        time.sleep(0.5)


def probe_nodes(store: Store, rank: int, world_size: int, timeout_s: float, check=lambda: None) -> list[int]:
    """Which ranks share a node: every rank creates a small /dev/shm segment, publishes its name and tries to
    open every other rank's. Returns ``node_of``, the same on every rank (rank 0's node is 0, the others numbered
    by their lowest rank). Raises TimeoutError: a rank did not take part in ``timeout_s``; or what ``check`` does."""
    mine = create_segment(64)
    try:
        store.set(f"probe/name/{rank}", mine.name)
        names = wait_get(store, [f"probe/name/{r}" for r in range(world_size)], timeout_s, check)
        seen = []
        for r, name in enumerate(names):
            if r != rank:
                with contextlib.suppress(FileNotFoundError):  # another node's
                    release_segment(open_segment(name.decode()), unlink=False)
                    seen.append(r)
        store.set(f"probe/seen/{rank}", json.dumps(seen))
        views = [json.loads(v) for v in wait_get(store, [f"probe/seen/{r}" for r in range(world_size)],
                                                   timeout_s, check)]
    finally:
        # Every rank has published what it saw only once it is done opening: then the segments may go.
        release_segment(mine, unlink=True)
    lowest = [min([r] + views[r]) for r in range(world_size)]
    numbering = {node: i for i, node in enumerate(dict.fromkeys(lowest))}
    return [numbering[n] for n in lowest]


def wait_get(store: Store, keys: list[str], timeout_s: float, check=lambda: None) -> list[bytes]:
    """The values of ``keys``, waited for (``wait_until``). Raises TimeoutError: not all within ``timeout_s``;
    or what ``check`` raises."""

    def timed_out():
        missing = [k for k in keys if not store.check([k])]
        return TimeoutError(f"timed out after {timeout_s:g} s waiting for {', '.join(missing[:3])}")

    wait_until(lambda t: store.check(keys) or time.sleep(t), check, timeout_s, timed_out)
    return [store.get(k) for k in keys]


def is_stopped(p: mp.Process | None) -> bool:
    """Whether spawned process ``p`` is stopped (SIGSTOP, or traced): its state in /proc is T or t."""
    with contextlib.suppress(OSError, AttributeError, IndexError), open(f"/proc/{p.pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] in "Tt"
    return False


SHIELDED = {signal.SIGINT, signal.SIGUSR1}  # blocked in a spawned worker until ``worker.serve`` takes them


def start_shielded(p: mp.Process) -> None:
    """``p.start()`` with SIGINT (rank 0 handles a Ctrl-C) and SIGUSR1 (``worker.serve`` registers its stack dump)
    blocked in the child from its first instruction: a blocked mask survives spawn, so one that comes while it
    imports waits for ``serve``, which ignores SIGINT and dumps on SIGUSR1. Rank 0 keeps its handlers: a stop signal
    now goes to another of its threads or waits for this one (with them ignored here, session 54's CI lost it: the
    run went on)."""
    resource_tracker.ensure_running()  # its first start unblocks SIGINT in this thread
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, SHIELDED)
    try:
        p.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def init_group(backend: str, store: Store, rank: int, world_size: int, timeout_s: float) -> None:
    """``dist.init_process_group`` on ``store``. Raises what it raises; after a failure (a rank died in the
    rendezvous) torch has counted the group that never formed and would name this process's next one "1", where a
    fresh worker's is "0": their rendezvous would wait out its timeout. The count goes back to 0 then."""
    try:
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=timeout_s))
    except BaseException:
        if not dist.is_initialized():
            dist.distributed_c10d._world.group_count = 0
        raise
