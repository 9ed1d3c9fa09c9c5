"""``workload=serve``: requests arriving over time through the engine's ``add_request`` / ``step``, as ``vllm bench
serve`` sends them; with ``max_concurrency`` a request waits on the client side (docs/SERVE.md)."""

from __future__ import annotations

import json
import time
from typing import TextIO

import numpy as np
from tqdm.auto import tqdm

from engine import LLM, ConfigError

from .metrics import latencies
from .workloads import Workload


def serve_columns(work: Workload) -> dict:
    """A serve run's configuration columns ({} for other workloads); slo: the bounds set (``ttft_ms=200 ...``)."""
    if work.arrivals is None:
        return {}
    slo = " ".join(f"{k}={v:g}" for k, v in sorted(work.slo.items()) if v is not None) or None
    return {"request_rate": work.request_rate, "burstiness": work.burstiness,
            "max_concurrency": work.max_concurrency, "slo": slo}


def check_idle_gaps(work: Workload, control: str, tp: int, timeout_s: float) -> None:
    """Raises ConfigError: under ``control=ideal`` at tp > 1, a gap between arrivals of ``timeout_s`` (s) or more."""
    gaps = np.diff(work.arrivals) if work.arrivals is not None and len(work.arrivals) > 1 else np.zeros(1)
    if control == "ideal" and tp > 1 and gaps.max() >= timeout_s:
        raise ConfigError(f"control=ideal: the trace has a {gaps.max():.0f} s gap between arrivals, and ideal's "
                          f"workers wait it out inside a collective, which gives up after llm.timeout_s="
                          f"{timeout_s:g} s: raise llm.timeout_s above {gaps.max():.0f}")


def request_record(index: int, out: dict, work: Workload, start_s: float, sent_s: float) -> dict:
    """One line of the per-request JSONL (docs/SERVE.md): times in s from the run's start, latencies in ms."""
    sent = out["arrival_s"]
    return {"request_id": index, "arrival_s": work.arrivals[index], "sent_s": sent_s - start_s,
            "input_len": len(work.prompts[index]), "output_len": len(out["token_ids"]), **latencies(out),
            "queue_ms": (out["first_scheduled_s"] - sent) * 1e3 if out["first_scheduled_s"] is not None else None,
            "finish_reason": out["finish_reason"]}


def serve_pass(llm: LLM, work: Workload, progress: bool, plan: list[tuple[int, bool]] | None = None,
               log: TextIO | None = None) -> tuple[list[dict], list, float, float, float]:
    """The requests sent at their arrival times to a reset engine, stepped until all finish. ``plan``: admissions
    to replay (``control=ideal``); ``log``: the per-request JSONL, a line per request as it finishes, flushed.
    Returns (records in trace order, step records, start s, last token s, the loop's own cost in us per step)."""
    llm.reset()
    llm.replay_admissions(plan)
    n = len(work.prompts)
    limit = work.max_concurrency or n
    index: dict[int, int] = {}  # in flight: engine request id -> trace index
    records: list[dict | None] = [None] * n
    sent_at = [0.0] * n
    bar = tqdm(total=n, desc="serve", unit="req", disable=not progress, dynamic_ncols=True)
    start = time.perf_counter()
    arrivals = [start + a for a in work.arrivals]
    sent, loop_ns, last = 0, 0, start
    while sent < n or llm.has_unfinished_requests():
        t0 = time.perf_counter_ns()
        while sent < n and len(index) < limit:  # unbounded: every request at once, each at its arrival time
            at = sent_at[sent] = arrivals[sent] if limit >= n else max(arrivals[sent], time.perf_counter())
            index[llm.add_request(work.prompts[sent], work.params[sent], at)] = sent
            sent += 1
        t1 = time.perf_counter_ns()
        finished = llm.step()
        t2 = time.perf_counter_ns()
        for out in finished:
            i = index.pop(out["request_id"])
            records[i], last = request_record(i, out, work, start, sent_at[i]), max(last, out["token_times_s"][-1])
            if log:
                log.write(json.dumps(records[i]) + "\n")
                log.flush()
        bar.update(len(finished))
        loop_ns += (t1 - t0) + (time.perf_counter_ns() - t2)
    bar.close()
    return records, llm.steps, start, last, (loop_ns + llm.admit_ns) / 1e3 / max(len(llm.steps), 1)
