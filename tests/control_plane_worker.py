"""The worker side of the control-plane conformance tests (a module of its own so spawn can import it).

The driver sends ``("check", index, payload, sha256)``; the worker verifies order and checksum of every
message and reports ``(rank, received, errors)`` on the result queue when the exit message arrives.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp

from backends import EXIT, PeerGone


def check_messages(endpoint) -> tuple[int, list[str]]:
    """Receive ``("check", index, payload, sha256)`` messages until EXIT; returns (how many, the first
    errors: a wrong index or checksum)."""
    received, errors = 0, []
    while True:
        method, args = endpoint.recv()
        if method == EXIT:
            return received, errors[:5]
        index, payload, digest = args
        if index != received:
            errors.append(f"message {received} arrived as {index}")
        if hashlib.sha256(payload).hexdigest() != digest:
            errors.append(f"message {index} ({len(payload)} B) is corrupt")
        received += 1


def start_echo_workers(cp, ranks):
    """Spawn ``echo_worker`` for each of ``ranks`` on plane ``cp``; returns (processes, result queue)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=echo_worker, args=(cp.endpoint(r), results), daemon=True) for r in ranks]
    for p in procs:
        p.start()
    cp.workers_started()
    return procs, results


def stop_echo_workers(procs, cp) -> None:
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
    cp.close()


def echo_worker(endpoint, results, store_port: int | None = None) -> None:
    """``store_port``: the driver's TCPStore, for a plane whose ends are found through the run's store."""
    parent = mp.parent_process()

    def alive():
        if not parent.is_alive():
            raise PeerGone("driver gone")

    endpoint.liveness_check = alive
    if store_port is None:
        endpoint.open()
    else:
        from torch.distributed import TCPStore

        endpoint.open(TCPStore("127.0.0.1", store_port, is_master=False))
    try:
        received, errors = check_messages(endpoint)
    finally:
        endpoint.close()
    results.put((endpoint.rank, received, errors))


def joins_then_dies(joined, world_size: int, timeout_s: float) -> None:
    """A broadcast worker's body that says it is joining the barrier group, then dies before the rendezvous."""
    import os
    import time

    joined.store.set(f"barrier-joining/{joined.rank}", "1")
    time.sleep(1.0)  # rank 0 is in the rendezvous by then
    os._exit(3)


def runs_commands(joined) -> int:
    """A body that only takes rank 0's commands (each a no-op) until the exit message."""
    from runtime.worker import command_loop

    return command_loop(joined.endpoint, joined.lifeline, lambda method, args: None)
