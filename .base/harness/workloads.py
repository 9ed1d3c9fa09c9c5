"""Workloads: the requests of one run, drawn reproducibly from the workload config and the seed, and
``workload=serve``'s pass, sending them at their arrival times as ``vllm bench serve`` does (docs/SERVE.md)."""

from __future__ import annotations

import dataclasses
import heapq
import json
import math
import random
import re
import time
from typing import TextIO

import numpy as np
from tqdm.auto import tqdm

from common import is_int, is_number
from engine import LLM, SamplingParams

from .metrics import latencies


@dataclasses.dataclass
class Workload:
    """iterations: generate calls of the whole batch in the timed run. ``serve`` only: ``arrivals`` (s from the
    run's start), ``request_rate`` (req/s), ``burstiness`` (the gaps' Gamma shape; inf: evenly spaced),
    ``max_concurrency`` (None: unbounded), ``slo`` ({key: ms or None})."""

    name: str
    prompts: list[list[int]]
    params: list[SamplingParams]
    warmup: bool
    iterations: int = 1
    arrivals: list[float] | None = None
    request_rate: float | None = None
    burstiness: float | None = None
    max_concurrency: int | None = None
    slo: dict | None = None

    @property
    def prompt_lens(self) -> list[int]:
        return [len(p) for p in self.prompts]


def arrival_offsets(num: int, request_rate: float, burstiness: float, seed: int) -> list[float]:
    """Arrivals (s from the run's start) of ``num`` requests, from ``seed`` alone, placed as vLLM ``bench serve``'s
    ``get_request`` places them: the sums of Gamma(shape=burstiness, scale=1 / (request_rate * burstiness)) gaps,
    the first gap included (``burstiness=inf``: 1 / request_rate each), scaled so the last arrives at
    num / request_rate. All at 0 for ``request_rate=inf``."""
    if math.isinf(request_rate):
        return [0.0] * num
    gaps = (np.full(num, 1.0 / request_rate) if math.isinf(burstiness)
            else np.random.default_rng(seed).gamma(burstiness, 1.0 / (request_rate * burstiness), size=num))
    times = np.cumsum(gaps)
    if num and times[-1] > 0:
        times *= num / request_rate / times[-1]
    return times.tolist()


SLO_KEYS = ("ttft_ms", "tpot_ms", "e2el_ms")
MAX_PROMPT_TOKENS = 50_000_000  # every prompt is drawn before the run, as Python ints: ~2 GB at this bound
MAX_RAW_BYTES = 1 << 30  # a broadcast's raw payload
MIN_BURSTINESS = 0.01  # Gamma(shape) draws ~U^(1 / shape): below it more and more are 0 (half at shape 0.001)
MAX_ARRIVAL_SPAN_S = 86_400.0  # a serve trace longer than a day is a typo (request_rate=1e-6), not a benchmark


def check_serve(w: dict) -> None:
    """Raises ValueError naming the ``workload.`` key of a bad serve setting."""
    rate, burstiness = w.get("request_rate"), w.get("burstiness", 1.0)
    if not (is_number(rate) or rate == math.inf) or not rate > 0:
        raise ValueError(f"workload.request_rate must be a number > 0 (req/s) or inf, got {rate!r}")
    if not (is_number(burstiness) or burstiness == math.inf) or not burstiness >= MIN_BURSTINESS:
        raise ValueError(f"workload.burstiness must be a number >= {MIN_BURSTINESS} (1.0: Poisson; below "
                         f"{MIN_BURSTINESS}: more and more gaps underflow to 0 s) or inf (evenly spaced), got "
                         f"{burstiness!r}")
    if (span := w["num_prompts"] / rate) > MAX_ARRIVAL_SPAN_S:
        raise ValueError(f"workload.request_rate={rate:g} with {w['num_prompts']} prompts: the arrivals would span "
                         f"{span:.3g} s (num_prompts / request_rate), over a day ({MAX_ARRIVAL_SPAN_S:,.0f} s)")
    if (mc := w.get("max_concurrency")) is not None and (not is_int(mc) or mc < 1):
        raise ValueError(f"workload.max_concurrency must be null (unbounded) or an integer >= 1, got {mc!r}")
    if not isinstance(slo := w.get("slo") or {}, dict):
        raise ValueError(f"workload.slo must be a mapping of {', '.join(SLO_KEYS)}, got {slo!r}")
    for key, bound in slo.items():
        if key not in SLO_KEYS:
            raise ValueError(f"workload.slo.{key}: unknown SLO (known: {', '.join(SLO_KEYS)})")
        if bound is not None and (not is_number(bound) or not bound > 0):
            raise ValueError(f"workload.slo.{key} must be null (no bound) or a number > 0 (ms), got {bound!r}")


_DRAWN = {"min_input_len": 1, "max_input_len": 1, "min_output_len": 1, "max_output_len": 1, "max_token_id": 0}
INT_KEYS = {"random": {"num_seqs": 1, **_DRAWN}, "serve": {"num_prompts": 1, **_DRAWN},  # kind: {key: least value}
            "fixed": {"num_seqs": 1, "input_len": 1, "output_len": 1, "max_token_id": 0, "iterations": 1},
            "broadcast": {"decode_context": 1, "warmup": 1, "messages": 1, "min_messages": 1,
                          "max_bytes_per_payload": 1, "kvcache_block_size": 1, "gap_us": 0}}


def request_shape(w: dict) -> tuple[str, int, int, int]:
    """(the key counting the requests, their number, the longest prompt, the longest output) of workload ``w``."""
    if w["kind"] == "fixed":
        return "num_seqs", w["num_seqs"], w["input_len"], w["output_len"]
    key = "num_prompts" if w["kind"] == "serve" else "num_seqs"
    return key, w[key], w["max_input_len"], w["max_output_len"]


def unread_keys(w: dict) -> list[str]:
    """The keys of workload config ``w`` that its kind does not read (not in its schema), sorted."""
    from .conf_schema import WORKLOADS

    schema = WORKLOADS.get(w.get("kind"))
    return sorted(set(w) - {f.name for f in dataclasses.fields(schema)} - {"cpu"}) if schema else []


def check_workload(w: dict, on_cpu: bool = False) -> None:
    """Raises ValueError naming the ``workload.`` key to fix (``workload.cpu.KEY``: in its ``cpu`` block). ``on_cpu``:
    where a ``scale_on_cpu`` workload runs its ``cpu`` block, only what runs is checked (not the GPU sizes)."""
    cpu = w.get("cpu")
    if not (on_cpu and w.get("scale_on_cpu") and cpu):
        _check_values(w)
    if cpu:
        try:
            _check_values({**w, **cpu})
        except ValueError as e:
            raise ValueError(re.sub(r"workload\.(\w+)", lambda m: f"workload.cpu.{m[1]}" if m[1] in cpu else m[0],
                                    str(e))) from None


def _check_values(w: dict) -> None:
    kind = w.get("kind")
    if kind not in INT_KEYS:
        raise ValueError(f"workload {w.get('name')!r}: unknown kind {kind!r} (random, fixed, serve or broadcast)")
    for key, least in INT_KEYS[kind].items():
        if not is_int(v := w.get(key)) or v < least:
            raise ValueError(f"workload.{key} must be an integer >= {least}, got {v!r}")
    for lo, hi in (("min_input_len", "max_input_len"), ("min_output_len", "max_output_len")):
        if kind in ("random", "serve") and w[lo] > w[hi]:
            raise ValueError(f"workload.{lo}={w[lo]} is above workload.{hi}={w[hi]}")
    if kind != "broadcast" and (shape := request_shape(w))[1] * shape[2] > MAX_PROMPT_TOKENS:
        raise ValueError(f"workload.{shape[0]}={shape[1]} x up to {shape[2]} prompt tokens is more than "
                         f"{MAX_PROMPT_TOKENS:,} tokens to draw before the run")
    if kind == "serve":
        check_serve(w)
    try:  # the engine's own rule, said with the key's full name
        SamplingParams(temperature=w.get("temperature", 0.0))
    except ValueError as e:
        raise ValueError(f"workload.{e}") from None
    if kind == "broadcast":
        for key, least in (("decode_batches", 1), ("raw_bytes", 0)):
            if not all(is_int(x) and x >= least for x in w.get(key) or []):
                raise ValueError(f"workload.{key} must be a list of integers >= {least}, got {w.get(key)!r}")
        pairs = w.get("prefill_batches") or []
        if not all(isinstance(p, list) and len(p) == 2 and all(is_int(x) and x >= 1 for x in p) for p in pairs):
            raise ValueError(f"workload.prefill_batches must be a list of [num_seqs, tokens] pairs >= 1, got {pairs!r}")
        if not (w.get("decode_batches") or pairs or w.get("raw_bytes")):
            raise ValueError("workload=broadcast has no payload: decode_batches, prefill_batches and raw_bytes are "
                             "all empty")
        drawn = [(f"decode_batches: {b} x decode_context={w['decode_context']}", b * w["decode_context"])
                 for b in w.get("decode_batches") or []] + [(f"prefill_batches: {n} x {t}", n * t) for n, t in pairs]
        if big := next((what for what, n in drawn if n > MAX_PROMPT_TOKENS), None):
            raise ValueError(f"workload.{big} tokens is more than {MAX_PROMPT_TOKENS:,} to draw before the run")
        if big := [n for n in w.get("raw_bytes") or [] if n > MAX_RAW_BYTES]:
            raise ValueError(f"workload.raw_bytes: {big[0]} is more than {MAX_RAW_BYTES >> 20} MiB, the largest "
                             "payload sent (every rank holds it)")


def given_workload(w: dict, overrides: list[str]) -> dict:
    """Workload config ``w`` with the keys the command sets (``overrides``) dropped from its ``cpu`` scale-down."""
    w = {**w, "cpu": dict(w["cpu"])} if isinstance(w.get("cpu"), dict) else dict(w)
    for item in overrides:
        key = item.lstrip("+~").split("=", 1)[0]
        if key.startswith("workload.") and "cpu" in w:
            w["cpu"].pop(key.split(".", 1)[1], None)
    return w


def effective_workload(w: dict, device: str) -> dict:
    """A copy of workload config ``w``, its ``cpu`` block applied on CPU when ``scale_on_cpu``."""
    return {**w, **w["cpu"]} if device == "cpu" and w.get("scale_on_cpu") and w.get("cpu") else dict(w)


def build_workload(w: dict, device: str, seed: int, vocab_size: int) -> Workload:
    """The workload of config ``w`` on ``device``, token ids in ``[0, max_token_id]``. random and serve: nano-vllm's
    bench.py recipe, lengths and ``max_tokens`` uniform in [min, max] (serve: at :func:`arrival_offsets`). fixed:
    ``input_len`` tokens, ``output_len`` greedy ones, ``iterations`` times. Raises ValueError: a bad one, or one
    that runs no requests."""
    w = effective_workload(w, device)
    check_workload(w)
    if w.get("kind") not in ("random", "fixed", "serve"):
        raise ValueError(f"workload {w.get('name')!r} of kind {w.get('kind')!r} runs no requests through the engine")
    rng = random.Random(seed)
    top = min(w["max_token_id"], vocab_size - 1)
    _, n, _, _ = request_shape(w)
    if w["kind"] == "fixed":
        prompts = [[rng.randint(0, top) for _ in range(w["input_len"])] for _ in range(n)]
        params = [SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=w["output_len"])] * n
        return Workload(w["name"], prompts, params, bool(w.get("warmup", True)), int(w.get("iterations", 1)))
    # bench.py's draw order (prompts, then output lengths): seed 0 gives its exact requests (133,966 tokens out)
    prompts = [[rng.randint(0, top) for _ in range(rng.randint(w["min_input_len"], w["max_input_len"]))]
               for _ in range(n)]
    params = [SamplingParams(temperature=w["temperature"], ignore_eos=w["ignore_eos"],
                             max_tokens=rng.randint(w["min_output_len"], w["max_output_len"])) for _ in range(n)]
    work = Workload(w["name"], prompts, params, bool(w.get("warmup", True)))
    if w["kind"] != "serve":
        return work
    rate, burstiness = float(w["request_rate"]), float(w.get("burstiness", 1.0))
    slo = {k: (float(v) if v is not None else None) for k, v in (w.get("slo") or {}).items()}
    return dataclasses.replace(work, arrivals=arrival_offsets(n, rate, burstiness, seed), request_rate=rate,
                               burstiness=burstiness, max_concurrency=w.get("max_concurrency"), slo=slo)


def serve_columns(work: Workload) -> dict:
    """A serve run's configuration columns ({} for other workloads); slo: the bounds set (``ttft_ms=200 ...``)."""
    if work.arrivals is None:
        return {}
    slo = " ".join(f"{k}={v:g}" for k, v in sorted(work.slo.items()) if v is not None) or None
    return {"request_rate": work.request_rate, "burstiness": work.burstiness,
            "max_concurrency": work.max_concurrency, "slo": slo}


def idle_gap_problem(w: dict, seed: int, control: str, tp: int, timeout_s: float) -> str | None:
    """Why the trace of workload config ``w`` (as it runs) and ``seed`` cannot run: under ``control=ideal`` at
    tp > 1, a gap before an arrival of ``timeout_s`` (s) or more, as ideal's workers wait it out in a collective.
    Known before any run: the arrivals come from ``w`` and ``seed`` alone."""
    if w.get("kind") != "serve" or control != "ideal" or tp < 2:
        return None
    gap = np.diff([0.0, *arrival_offsets(w["num_prompts"], float(w["request_rate"]), float(w.get("burstiness", 1.0)),
                                         seed)]).max()  # the first arrival's wait included
    if gap < timeout_s:
        return None
    return (f"control=ideal: the trace has a {gap:.0f} s wait for an arrival, and ideal's workers wait it out "
            f"inside a collective, which gives up after llm.timeout_s={timeout_s:g} s: raise llm.timeout_s above "
            f"{gap:.0f}")


def request_record(index: int, out: dict, work: Workload, start_s: float) -> dict:
    """One line of the per-request JSONL (docs/SERVE.md): times in s from the run's start, latencies in ms. ``sent_s``
    is when the request was sent, the time its latencies count from: its arrival, the freeing of a slot under
    ``max_concurrency``, or under ``control=ideal`` an admission the recording made before the scheduled arrival."""
    sent, arrival = out["arrival_s"], work.arrivals[index]
    # a send at the scheduled arrival gives its very number: start_s + a - start_s may differ from a in the last bit
    sent_s = arrival if sent == start_s + arrival else sent - start_s
    return {"request_id": index, "arrival_s": round(arrival, 9), "sent_s": round(sent_s, 9),
            "input_len": len(work.prompts[index]), "output_len": len(out["token_ids"]), **latencies(out),
            "queue_ms": (out["first_scheduled_s"] - sent) * 1e3 if out["first_scheduled_s"] is not None else None,
            "finish_reason": out["finish_reason"]}


def serve_pass(llm: LLM, work: Workload, progress: bool, plan: list[tuple[int, bool]] | None = None,
               log: TextIO | None = None) -> tuple[list[dict], list, float, float, float]:
    """The requests sent at their arrival times to a reset engine, stepped until all finish; with ``max_concurrency``
    a request waits on the client side. ``plan``: admissions to replay (``control=ideal``); ``log``: the per-request
    JSONL, a line per request as it finishes, flushed. Returns (records in trace order, step records, start s, last
    token s, the loop's own cost in us per step)."""
    llm.reset()
    llm.replay_admissions(plan)
    n = len(work.prompts)
    limit = work.max_concurrency or n
    index: dict[int, int] = {}  # in flight: engine request id -> trace index
    records: list[dict | None] = [None] * n
    bar = tqdm(total=n, desc="serve", unit="req", disable=not progress, dynamic_ncols=True)
    start = time.perf_counter()
    arrivals = [start + a for a in work.arrivals]
    free = [start] * min(limit, n)  # a min-heap of the times the client's slots freed
    sent, loop_ns, last = 0, 0, start
    while sent < n or llm.has_unfinished_requests():
        t0 = time.perf_counter_ns()
        while sent < n and free:  # unbounded: every request at once, each at its arrival time
            at = max(arrivals[sent], heapq.heappop(free))
            index[llm.add_request(work.prompts[sent], work.params[sent], at)] = sent
            sent += 1
        t1 = time.perf_counter_ns()
        finished = llm.step()
        t2 = time.perf_counter_ns()
        done = [index.pop(out["request_id"]) for out in finished]
        for i, out in zip(done, finished):
            records[i], last = request_record(i, out, work, start), max(last, out["token_times_s"][-1])
            if limit < n:  # its slot freed with its last token, though step() may report it a step later
                heapq.heappush(free, out["token_times_s"][-1])
        bar.update(len(finished))
        loop_ns += (t1 - t0) + (time.perf_counter_ns() - t2)
        for i in done if log else ():  # after the clock: the file is no cost of the loop
            print(json.dumps(records[i]), file=log, flush=True)
    bar.close()
    return records, llm.steps, start, last, (loop_ns + llm.admit_ns) / 1e3 / max(len(llm.steps), 1)
