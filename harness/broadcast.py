"""``workload=broadcast``: the control plane alone, no model, one row per payload and repeat. Per payload a
warm-up, then N messages, each paced as in the engine: a gloo barrier, then ``gap_us`` on rank 0."""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torch.distributed import PrefixStore
from tqdm.auto import tqdm

from engine import ConfigError, SamplingParams
from engine.sequence import Sequence
from engine.step_batch import StepBatch
from runtime.cluster import Cluster
from runtime.launch import Launch, init_group
from runtime.worker import command_loop

from .host_cpu import OtherCpu
from .job_setup import base_row, check_results_dir, failed
from .metrics import message_metrics
from .report import SWEEP_ROWS, print_broadcast, show_progress, stall_error
from .signals import as_interrupt

JOINING = "barrier-joining"  # store stage: a worker is about to join the gloo barrier group


def broadcast_worker(joined, world_size: int, timeout_s: float) -> int:
    """A worker's body: per message, meet rank 0 in a gloo barrier. Returns the exit code."""
    joined.store.set(f"{JOINING}/{joined.rank}", "1")
    init_group("gloo", PrefixStore("barrier", joined.store), joined.rank, world_size, timeout_s)
    try:
        return command_loop(joined.endpoint, joined.lifeline, lambda method, args: dist.barrier())
    finally:
        dist.destroy_process_group()


def step_message(num_seqs: int, num_tokens: int, prefill: bool, block_size: int) -> tuple:
    """``("run", step_bytes)`` as the engine sends it for ``num_seqs`` sequences of ``num_tokens`` tokens each."""
    rng = np.random.default_rng(0)
    seqs = [Sequence(rng.integers(0, 10000, num_tokens).tolist(), SamplingParams(), block_size)
            for _ in range(num_seqs)]
    for i, s in enumerate(seqs):  # consecutive blocks, as many for each
        s.block_table = list(range(i * s.num_blocks, (i + 1) * s.num_blocks))
    return ("run", StepBatch.from_sequences(seqs, prefill).to_bytes())


class BroadcastGroup(Cluster):
    """Rank 0 of a model-less group: a control plane, ``tp - 1`` workers and a gloo barrier group. Raises
    ConfigError: a bad plane option, or one that cannot reach the ranks."""

    def __init__(self, control: str, tp: int, options: dict, timeout_s: float, startup_timeout_s: float = 600.0,
                 launch=None):
        super().__init__(tp, timeout_s, startup_timeout_s, launch, control, options, dist.destroy_process_group)
        self.tp = tp
        try:
            self.start(broadcast_worker, (tp, timeout_s))
            # join once every worker is about to: one that dies first is named at once, not waited out by gloo
            self.group.wait_for(JOINING)
            try:  # a worker that dies between its JOINING and the rendezvous is waited out: then named
                init_group("gloo", PrefixStore("barrier", self.group.store), 0, tp, timeout_s)
            except RuntimeError as e:
                self.explain(e, "the barrier group's rendezvous")
        except BaseException:
            self.close(0)
            raise

    def run(self, message: tuple, count: int, gap_s: float) -> None:
        """Send ``message`` ``count`` times, each followed by a barrier and ``gap_s`` of pause. Raises WorkerError
        (a worker died or failed), else DataPlaneError (a barrier timed out)."""
        for _ in range(count):
            self.send(*message)
            try:
                dist.barrier()
            except RuntimeError as e:
                self.explain(e, "the barrier after a message", wait_s=1.0)
            if gap_s:
                time.sleep(gap_s)


def run_broadcast(w: dict, group: BroadcastGroup, progress: bool, at: dict | None = None):
    """Yields per payload of workload ``w``: ``payload``, ``payload_bytes``, the latency columns, and ``status``
    ``stalled`` with its ``error`` where a rank was silent in the timed messages (else ``ok``, None). ``at["payload"]``
    names the payload in flight, for a failure's row."""
    at = {} if at is None else at
    bs = w["kvcache_block_size"]
    payloads = [(f"decode-{b}", step_message(b, w["decode_context"], False, bs)) for b in w["decode_batches"]]
    payloads += [(f"prefill-{n}x{t}", step_message(n, t, True, bs)) for n, t in w["prefill_batches"]]
    payloads += [(f"raw-{n}B", ("noop", os.urandom(n))) for n in w["raw_bytes"]]
    for name, message in tqdm(payloads, desc=f"broadcast {group.control.name} tp={group.tp}", disable=not progress):
        at["payload"] = name
        with OtherCpu() as others:  # the warm-up too: a timed run alone may be shorter than its window
            group.run(message, 1, w["gap_us"] / 1e6)  # the first warm-up message gives the size
            nbytes = group.collect_stats()["send"]["nbytes"][0]
            fits = w["max_bytes_per_payload"] // max(nbytes, 1)  # the byte cap holds for the warm-up too
            if (warm := int(min(w["warmup"], max(1, fits)))) > 1:
                group.run(message, warm - 1, w["gap_us"] / 1e6)
                group.collect_stats()
            count = int(min(w["messages"], max(w["min_messages"], fits)))
            group.run(message, count, w["gap_us"] / 1e6)
        stats = group.collect_stats()
        stalls = stall_error(stats["silent_s"])  # its one-way latencies hold the silence: no measurement
        yield {"payload": name, "payload_bytes": nbytes, "status": "stalled" if stalls else "ok", "error": stalls,
               **message_metrics(stats["send"], stats["recv"]), "cpu_others_cores": others.cores}


def run_broadcast_job(cfg: DictConfig, launch: Launch | None) -> int:
    """Rank 0: one group for the job, every payload ``repeat`` times; exit code 0, 1 (a failed row), 2, 130."""
    results, w = check_results_dir(cfg), OmegaConf.to_container(cfg.workload)
    row0 = {**base_row(cfg, "cpu"), "model": None, "dtype": None}
    try:
        group = BroadcastGroup(cfg.control.name, cfg.tp, OmegaConf.to_container(cfg.control.options),
                               cfg.llm.timeout_s, cfg.llm.startup_timeout_s, launch)
    except BaseException as e:
        e = as_interrupt(e)
        if isinstance(e, (ConfigError, ValueError)):
            print(f"error: {e}", file=sys.stderr)
            return 2
        return failed(results, row0, 0, e, cfg.repeat)
    row0.update(group.describe())
    r, path, stalled = 0, None, False
    try:
        for r in range(cfg.repeat):
            for result in run_broadcast(w, group, show_progress(cfg.progress), row0):
                row = {**row0, "repeat": r, **result}
                path = results.add(row)
                print_broadcast(row, w["messages"])
                if row["error"]:  # its numbers stay out of the sweep's summary
                    print(f"error: repeat {r} {row['payload']} stalled: {row['error']}", file=sys.stderr)
                    stalled = True
                else:
                    SWEEP_ROWS.append(row)
        if path:
            print(f"rows appended to {path}")
        return 1 if results.problem or stalled else 0
    except BaseException as e:
        return failed(results, row0, r, e, cfg.repeat)
    finally:
        group.close()
