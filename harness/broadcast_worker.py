"""Worker of ``workload=broadcast``: receive, record one-way latency (the endpoint does), meet rank 0 in a
gloo barrier; on ``(STEP, "report")`` send the samples so far to rank 0 and start afresh."""

from __future__ import annotations

import multiprocessing as mp
import signal
from datetime import timedelta

import torch.distributed as dist
from torch.distributed import TCPStore

from backends import EXIT, PeerGone
from backends.base import ControlStats

STEP = "control_step"


def broadcast_worker(endpoint, rank: int, world_size: int, store_port: int, timeout_s: float, reports) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = mp.parent_process()

    def driver_alive() -> None:
        if not parent.is_alive():
            raise PeerGone("the driver exited")

    endpoint.liveness_check = driver_alive
    try:
        endpoint.open()
        store = TCPStore("127.0.0.1", store_port, world_size, is_master=False, timeout=timedelta(seconds=timeout_s))
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=timeout_s))
        while True:
            method, args = endpoint.recv()
            if method == EXIT:
                break
            if method == STEP and args and args[0] == "report":
                stats, endpoint.recv_stats = endpoint.recv_stats, ControlStats()
                stats.nbytes.pop()  # the report message itself
                stats.ns.pop()
                reports.put((rank, stats.as_dict()))
            dist.barrier()
    except PeerGone:
        pass
    finally:
        endpoint.close()
        if dist.is_initialized():
            dist.destroy_process_group()
        reports.close()
        reports.join_thread()
