"""The worker body of ``workload=broadcast`` (``runtime/worker.py`` runs it): receive (the endpoint records
one-way latency), meet rank 0 in a gloo barrier; on ``(STEP, "report")`` send the samples so far to rank 0
on the lifeline and start afresh."""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist
from torch.distributed import PrefixStore

from backends import EXIT

STEP = "control_step"
JOINING = "barrier-joining"  # store stage: this worker is about to join the gloo barrier group


def broadcast_worker(joined, world_size: int, timeout_s: float) -> int:
    """``joined``: an ``runtime.worker.Joined``; returns the exit code."""
    endpoint, lifeline = joined.endpoint, joined.lifeline
    joined.store.set(f"{JOINING}/{joined.rank}", "1")
    dist.init_process_group("gloo", store=PrefixStore("barrier", joined.store), rank=joined.rank,
                            world_size=world_size, timeout=timedelta(seconds=timeout_s))
    try:
        while True:
            method, args = endpoint.recv()
            if method == EXIT:
                return 0
            if method == STEP and args and args[0] == "report":
                lifeline.send("stats", endpoint.take_recv_stats().drop_last().as_dict())  # without the report
            dist.barrier()
    finally:
        dist.destroy_process_group()
