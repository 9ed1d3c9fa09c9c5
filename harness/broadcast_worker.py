"""The worker body of ``workload=broadcast``: per message (its one-way latency recorded by the endpoint),
meet rank 0 in a gloo barrier."""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist
from torch.distributed import PrefixStore

from runtime.worker import command_loop

JOINING = "barrier-joining"  # store stage: this worker is about to join the gloo barrier group


def broadcast_worker(joined, world_size: int, timeout_s: float) -> int:
    """``joined``: a ``runtime.worker.Joined``; returns the exit code."""
    joined.store.set(f"{JOINING}/{joined.rank}", "1")
    dist.init_process_group("gloo", store=PrefixStore("barrier", joined.store), rank=joined.rank,
                            world_size=world_size, timeout=timedelta(seconds=timeout_s))
    try:
        return command_loop(joined.endpoint, joined.lifeline, lambda method, args: dist.barrier())
    finally:
        dist.destroy_process_group()
