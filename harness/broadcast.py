"""``workload=broadcast``: the control plane alone, no model. Per payload (the engine's decode and prefill
step messages, raw byte strings) a warm-up, then N messages, each paced as in the engine: a gloo barrier (its
collectives), then ``gap_us`` on rank 0 (its sampling and scheduling).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import numpy as np
import torch.distributed as dist
from torch.distributed import PrefixStore
from tqdm.auto import tqdm

from engine.sampling_params import SamplingParams
from engine.sequence import Sequence
from engine.step_batch import StepBatch
from runtime.cluster import Cluster

from .broadcast_worker import JOINING, broadcast_worker
from .metrics import message_metrics


def step_message(num_seqs: int, num_tokens: int, prefill: bool, block_size: int, seed: int = 0) -> tuple:
    """``("run", step_bytes)`` as the engine sends it for ``num_seqs`` sequences of ``num_tokens`` tokens each
    (all new in prefill, only the last in decode)."""
    rng = np.random.default_rng(seed)
    seqs, next_block = [], 0
    for _ in range(num_seqs):
        s = Sequence(rng.integers(0, 10000, num_tokens).tolist(), SamplingParams(), block_size)
        s.block_table = list(range(next_block, next_block + s.num_blocks))
        next_block += s.num_blocks
        seqs.append(s)
    return ("run", StepBatch.from_sequences(seqs, prefill).to_bytes())


def payloads(w: dict) -> list[tuple[str, tuple]]:
    """``(name, (method, *args))`` for every payload of the workload config ``w``."""
    bs = w["kvcache_block_size"]
    out = [(f"decode-{b}", step_message(b, w["decode_context"], False, bs)) for b in w["decode_batches"]]
    out += [(f"prefill-{n}x{t}", step_message(n, t, True, bs)) for n, t in w["prefill_batches"]]
    out += [(f"raw-{n}B", ("noop", os.urandom(n))) for n in w["raw_bytes"]]
    return out


class BroadcastGroup(Cluster):
    """rank 0 of a model-less group: a control plane, ``tp - 1`` workers (spawned, or torchrun's: ``launch``)
    and a gloo barrier group. Raises ConfigError: a bad plane option, or one that cannot reach the ranks."""

    def __init__(self, control: str, tp: int, options: dict, timeout_s: float, startup_timeout_s: float = 600.0,
                 launch=None):
        super().__init__(tp, timeout_s, startup_timeout_s, launch, control, options, dist.destroy_process_group)
        self.tp = tp
        try:
            self.start(broadcast_worker, (tp, timeout_s))
            # join once every worker is about to: one that dies first is named at once, not waited out by gloo
            self.group.wait_for(JOINING)
            dist.init_process_group("gloo", store=PrefixStore("barrier", self.group.store), rank=0, world_size=tp,
                                    timeout=timedelta(seconds=timeout_s))
        except BaseException:
            self.close(0)
            raise

    def run(self, message: tuple, count: int, gap_s: float) -> None:
        """Send ``message`` ``count`` times, each followed by a barrier and ``gap_s`` of pause. Raises
        WorkerError (a worker died or failed), else DataPlaneError when a barrier failed (timed out)."""
        for _ in range(count):
            self.send(*message)
            try:
                dist.barrier()
            except RuntimeError as e:
                self.explain(e, "the barrier after a message", wait_s=1.0)
            if gap_s:
                time.sleep(gap_s)


def run_broadcast(w: dict, group: BroadcastGroup, progress: bool):
    """Yields per payload of workload ``w``: ``payload``, ``payload_bytes`` and the latency columns."""
    for name, message in tqdm(payloads(w), desc=f"broadcast {group.control.name} tp={group.tp}",
                              disable=not progress):
        group.run(message, w["warmup"], w["gap_us"] / 1e6)
        nbytes = group.collect_stats()["send"]["nbytes"][0]
        count = int(min(w["messages"], max(w["min_messages"], w["max_bytes_per_payload"] // max(nbytes, 1))))
        group.run(message, count, w["gap_us"] / 1e6)
        stats = group.collect_stats()
        yield {"payload": name, "payload_bytes": nbytes, **message_metrics(stats["send"], stats["recv"])}
