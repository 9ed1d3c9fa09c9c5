"""workload=serve without processes: the arrival trace, the workload's checks, admission (engine/scheduler.py)
and the serve metrics against vLLM's formulas."""

from __future__ import annotations

import io
import math
import time
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import vllm_metrics

from engine.scheduler import Arrivals
from engine.sequence import SamplingParams, Sequence
from harness.metrics import serve_metrics
from harness.workloads import arrival_offsets, build_workload, check_workload, request_record, serve_columns, serve_pass

SERVE = dict(name="serve", kind="serve", num_prompts=8, min_input_len=4, max_input_len=16, min_output_len=2,
             max_output_len=8, max_token_id=100, temperature=0.0, ignore_eos=True, request_rate=4.0, burstiness=1.0,
             max_concurrency=None, slo={"ttft_ms": None, "tpot_ms": None, "e2el_ms": None}, warmup=True)


@pytest.mark.parametrize("rate,burstiness", [(10.0, 1.0), (2.5, 0.5), (100.0, 4.0), (1.0, 0.2)])
def test_arrivals_have_the_asked_rate_and_spread(rate, burstiness):
    gaps = np.diff(arrival_offsets(2001, rate, burstiness, seed=3))
    assert len(gaps) == 2000 and (gaps >= 0).all()
    cv = 1 / math.sqrt(burstiness)  # Gamma(k, theta): mean k * theta = 1 / rate, CV 1 / sqrt(k)
    standard_error = (cv / rate) / math.sqrt(len(gaps))
    assert abs(gaps.mean() - 1 / rate) < 3 * standard_error
    assert abs(gaps.std() / gaps.mean() - cv) < 0.1 * cv


def test_a_short_trace_runs_at_the_asked_rate_placed_as_vllm_places_it():
    """Seed 0's 200 arrivals at 16 req/s came 11.5% slow unscaled (a 1.6-sigma draw). Scaled as vLLM's
    ``get_request`` scales them, the first arrives one drawn gap after the start and the last at exactly 200/16 s,
    and the trace keeps its shape. (Here the first was at 0 and the last at 199/16 s: a run of 3 requests at
    0.2 req/s printed 0.27 req/s completed.)"""
    trace = arrival_offsets(200, 16.0, 1.0, seed=0)
    assert trace[-1] == pytest.approx(200 / 16.0, rel=1e-12)
    raw = np.random.default_rng(0).gamma(1.0, 1 / 16.0, size=200)
    assert np.allclose(np.diff([0.0, *trace]) / trace[-1], raw / raw.sum())
    assert arrival_offsets(1, 16.0, 1.0, seed=0) == [1 / 16.0]


def test_the_trace_comes_from_the_seed_alone():
    assert arrival_offsets(50, 8.0, 1.0, seed=1) == arrival_offsets(50, 8.0, 1.0, seed=1)
    assert arrival_offsets(50, 8.0, 1.0, seed=1) != arrival_offsets(50, 8.0, 1.0, seed=2)
    assert arrival_offsets(5, math.inf, 1.0, seed=1) == [0.0] * 5
    assert 0 < arrival_offsets(5, 8.0, 1.0, seed=1)[0] < 5 / 8.0  # one drawn gap after the start, as vLLM


def test_serve_draws_the_requests_bench_draws():
    bench = build_workload({**SERVE, "kind": "random", "num_seqs": 8}, "cpu", 0, 1000)
    serve = build_workload(SERVE, "cpu", 0, 1000)
    assert serve.prompts == bench.prompts and [p.max_tokens for p in serve.params] == [
        p.max_tokens for p in bench.params]
    assert serve_columns(serve) == {"request_rate": 4.0, "burstiness": 1.0, "max_concurrency": None, "slo": None}
    assert serve_columns(bench) == {}


@pytest.mark.parametrize("key,value,says", [
    ("request_rate", 0, "request_rate must be a number > 0"), ("request_rate", -1.0, "request_rate"),
    ("request_rate", float("nan"), "request_rate"), ("request_rate", True, "request_rate"),
    ("burstiness", 0.0, "burstiness must be a number >= 0.01"), ("burstiness", 1e-300, "burstiness"),
    ("burstiness", float("nan"), "burstiness"), ("burstiness", -math.inf, "burstiness"),
    ("max_concurrency", 0, "max_concurrency must be null"), ("max_concurrency", 1.5, "max_concurrency"),
    ("slo", {"ttft_ms": 0}, "slo.ttft_ms must be null"), ("slo", {"tpot_ms": -3.0}, "slo.tpot_ms"),
    ("slo", {"e2el_ms": 0}, "a number > 0"),  # vLLM's --goodput takes 0: docs/REFERENCE.md says it is refused here
    ("slo", {"itl_ms": 5}, "slo.itl_ms: unknown SLO"), ("slo", [1], "slo must be a mapping")])
def test_bad_serve_settings_are_refused(key, value, says):
    with pytest.raises(ValueError, match=says.replace(".", r"\.")):
        check_workload({**SERVE, key: value})


def test_good_serve_settings_pass():
    check_workload({**SERVE, "request_rate": math.inf, "max_concurrency": 1, "slo": {"ttft_ms": 100, "e2el_ms": None}})
    check_workload({**SERVE, "burstiness": math.inf})
    check_workload({**SERVE, "burstiness": 0.01})


def test_infinite_burstiness_spaces_the_arrivals_evenly_as_vllm_does():
    assert arrival_offsets(5, 4.0, math.inf, seed=1) == [0.25, 0.5, 0.75, 1.0, 1.25]
    assert arrival_offsets(5, math.inf, math.inf, seed=1) == [0.0] * 5


def seq(arrival: float) -> Sequence:
    s = Sequence([1, 2], SamplingParams(max_tokens=2), 16)
    s.arrival_s = arrival
    return s


def test_admission_by_arrival_time_and_the_idle_wait():
    a = Arrivals()
    late, early, middle = seq(3.0), seq(1.0), seq(2.0)
    for s in (late, early, middle):
        a.add(s)
    assert a.wait_until(0.5, 0, idle=False) is None  # busy: never wait
    assert a.wait_until(0.5, 0, idle=True) == 1.0  # idle: until the next arrival
    assert a.due(2.5, 0, idle=True) == [early, middle] and len(a) == 1
    a.on_launch()
    assert a.log == [(2, True)] and a.due(2.9, 1, idle=False) == [] and a.due(3.0, 1, idle=False) == [late]
    a.on_launch()
    assert a.log == [(2, True), (3, False)]


def test_a_plan_admits_at_the_recorded_launch_in_the_recorded_state():
    a = Arrivals(plan=[(1, True), (1, False), (3, False), (4, True)])
    seqs = [seq(t) for t in (0.0, 0.5, 0.6, 9.0)]
    for s in seqs:
        a.add(s)
    assert a.due(10.0, 0, idle=True) == seqs[:1]  # everything has arrived, but the recording admitted one
    a.on_launch()
    assert a.due(10.0, 1, idle=False) == []
    a.on_launch()
    assert a.wait_until(0.1, 2, idle=False) is None  # admitted busy: no stall of the running batch ...
    assert a.due(0.1, 2, idle=False) == seqs[1:3] and [s.arrival_s for s in seqs[1:3]] == [0.1, 0.1]  # ... from here
    a.on_launch()
    # The recording admitted the last one idle: while busy at that launch it waits, however late it is ...
    assert a.wait_until(20.0, 3, idle=False) is None and a.due(20.0, 3, idle=False) == []
    assert a.wait_until(5.0, 3, idle=True) == 9.0  # ... then, idle, for its arrival: the run keeps its length
    assert a.due(9.0, 3, idle=True) == seqs[3:] and seqs[3].arrival_s == 9.0


def test_serve_metrics_follow_vllm_and_one_token_meets_the_tpot_slo():
    work = build_workload({**SERVE, "slo": {"ttft_ms": 50.0, "tpot_ms": 10.0, "e2el_ms": None}}, "cpu", 0, 1000)
    rng = np.random.default_rng(0)
    records = []
    for i in range(8):
        n = 1 if i == 0 else int(rng.integers(2, 9))
        gaps = list(rng.uniform(2, 15, n - 1))
        ttft = float(rng.uniform(10, 80))
        records.append({"request_id": i, "sent_s": work.arrivals[i], "input_len": 5, "output_len": n, "ttft_ms": ttft,
                        "tpot_ms": sum(gaps) / (n - 1) if n > 1 else None, "itl_ms": gaps,
                        "e2el_ms": ttft + sum(gaps), "queue_ms": 1.0})
    records[0]["ttft_ms"] = records[0]["e2el_ms"] = 20.0  # one token, fast: meets every SLO, TPOT too
    row = serve_metrics(records, work, 100.0, 103.0)
    want = vllm_metrics(records, 3.0, {"ttft_ms": 50.0, "tpot_ms": 10.0})
    for key, value in want.items():
        assert row[key] == pytest.approx(value), key
    assert row["goodput_req_s"] >= 1 / 3.0  # the one-token request counts
    assert serve_metrics(records, build_workload(SERVE, "cpu", 0, 1000), 100.0, 103.0)["goodput_req_s"] is None


class InstantEngine:
    """The request API of ``engine.LLM`` over no model: a request runs one step per output token once it has
    arrived, every step takes 2 ms; records the most requests it ever held."""

    def __init__(self):
        self.admit_ns, self.steps, self.most = 0, [], 0

    def reset(self):
        self.pending, self.running, self.steps, self.ids = [], [], [], 0

    def replay_admissions(self, plan):
        assert plan is None

    def add_request(self, prompt, params, arrival_s):
        self.ids += 1
        self.pending.append({"request_id": self.ids, "max": params.max_tokens, "arrival_s": arrival_s, "t": []})
        self.most = max(self.most, len(self.pending) + len(self.running))
        return self.ids

    def has_unfinished_requests(self):
        return bool(self.pending or self.running)

    def step(self):
        time.sleep(0.002)
        now = time.perf_counter()
        self.running += [r for r in self.pending if r["arrival_s"] <= now]
        self.pending = [r for r in self.pending if r["arrival_s"] > now]
        self.steps.append(now)
        for r in self.running:
            r["t"].append(now)
        done = [r for r in self.running if len(r["t"]) == r["max"]]
        self.running = [r for r in self.running if len(r["t"]) < r["max"]]
        return [{"request_id": r["request_id"], "token_ids": [0] * r["max"], "finish_reason": "length",
                 "arrival_s": r["arrival_s"], "first_scheduled_s": r["t"][0], "token_times_s": r["t"],
                 "num_preemptions": 0} for r in done]


def test_max_concurrency_holds_requests_on_the_client_side_as_vllm_does():
    work = build_workload({**SERVE, "num_prompts": 12, "request_rate": 400.0, "max_concurrency": 2}, "cpu", 0, 1000)
    engine = InstantEngine()
    records, _, start, last, _ = serve_pass(engine, work, progress=False)
    assert engine.most == 2 and [r["request_id"] for r in records] == list(range(12))
    for r in records:
        assert r["sent_s"] >= r["arrival_s"] - 1e-9  # sent when a slot freed, never before its arrival
    assert any(r["sent_s"] > r["arrival_s"] + 1e-4 for r in records)  # some waited for a slot
    row = serve_metrics(records, work, start, last)
    assert row["achieved_rate_req_s"] < 400.0 and row["num_requests"] == 12


class LateEngine(InstantEngine):
    """Reports a finished request one step after its last token, as the engine does on a CPU with async
    scheduling (the next step has run before the finished one is returned)."""

    def reset(self):
        super().reset()
        self.held = []

    def has_unfinished_requests(self):
        return super().has_unfinished_requests() or bool(self.held)

    def step(self):
        done, self.held = self.held, super().step()
        return done


def test_a_held_request_is_sent_when_its_slot_freed_not_when_the_engine_reported_it():
    """Reported (session 34's trial): with async scheduling on a CPU a held request went in a whole step (20-37 ms)
    after the last token of the request whose slot it took; vLLM's client sends it at that token."""
    work = build_workload({**SERVE, "num_prompts": 10, "request_rate": math.inf, "max_concurrency": 2}, "cpu", 0, 1000)
    engine = LateEngine()
    records, *_ = serve_pass(engine, work, progress=False)
    assert engine.most <= 3  # the reported-late request still counts in the engine: at most one step's worth
    ends = sorted(r["sent_s"] + r["e2el_ms"] / 1e3 for r in records)
    held = sorted(r["sent_s"] for r in records)[2:]  # the first two took the free slots at t=0
    assert held == pytest.approx(ends[:8], abs=1e-6)  # each at the k-th freed slot's last token (1 step: 2 ms)
    work = build_workload({**SERVE, "num_prompts": 10, "request_rate": 300.0}, "cpu", 0, 1000)
    records, *_ = serve_pass(engine, work, progress=False)  # unbounded: each sent at its arrival, not 1e-12 s before
    assert all(r["sent_s"] == r["arrival_s"] > 0 for r in records)


def test_a_request_sent_at_its_arrival_has_sent_s_equal_to_arrival_s_to_the_ns():
    """Reported (session 35's metrics audit): 5 of 89 requests read ``sent_s`` 1 ns before ``arrival_s`` (rounded
    apart: start + a - start is not a in the last bit). Here start 421497.76... and a 0.376... round 1 ns apart."""
    work = build_workload({**SERVE, "num_prompts": 1}, "cpu", 0, 1000)
    start, a = 421497.7605298668, 0.37607860950262584
    assert round(start + a - start, 9) != round(a, 9)  # the case
    work.arrivals[0] = a
    out = {"arrival_s": start + a, "token_ids": [1, 2], "token_times_s": [start + a + 0.01, start + a + 0.02],
           "first_scheduled_s": start + a, "finish_reason": "length"}
    record = request_record(0, out, work, start)
    assert record["sent_s"] == record["arrival_s"] == round(a, 9)
    held = request_record(0, {**out, "arrival_s": start + a + 0.5}, work, start)
    assert held["sent_s"] == pytest.approx(a + 0.5, abs=1e-9) and held["arrival_s"] == round(a, 9)


class SlowLog(io.StringIO):
    """A requests file whose every write takes 5 ms."""

    def write(self, text):
        time.sleep(0.005)
        return super().write(text)


def test_the_requests_file_is_written_outside_the_loops_clock():
    """Reported (session 35's metrics audit): ``save_requests=true`` raised ``serve_loop_us_per_step`` by 55%
    (the file's writes were timed), though the option is not in the row's ``overrides``."""
    work = build_workload({**SERVE, "num_prompts": 6, "request_rate": math.inf}, "cpu", 0, 1000)
    log = SlowLog()
    records, steps, *_, loop_us = serve_pass(InstantEngine(), work, progress=False, log=log)
    assert len(log.getvalue().splitlines()) == 6 and loop_us < 2500  # 6 lines x 5 ms over <= 8 steps: >= 3750


class EarlyEngine(InstantEngine):
    """Admits every pending request at once, each counting from its admission as ideal's replay does (the
    scheduler moves ``arrival_s`` to then)."""

    def step(self):
        now = time.perf_counter()
        for r in self.pending:
            r["arrival_s"] = min(r["arrival_s"], now)
        self.running, self.pending = self.running + self.pending, []
        return super().step()


def test_a_request_admitted_before_its_arrival_counts_from_its_admission_in_the_file():
    """Reported: under control=ideal a request's file line kept the scheduled send while its latencies counted
    from its earlier admission, so sent_s + e2el passed the run's end."""
    work = build_workload({**SERVE, "num_prompts": 6, "request_rate": 20.0}, "cpu", 0, 1000)
    records, _, start, last, _ = serve_pass(EarlyEngine(), work, progress=False)
    assert any(r["sent_s"] < r["arrival_s"] - 0.01 for r in records)  # admitted early
    assert max(r["sent_s"] + r["e2el_ms"] / 1e3 for r in records) <= last - start + 1e-9


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_warm_up_takes_the_workloads_first_prompts_on_cuda(device):
    """On CUDA the untimed warm-up also runs the first WARM_PROMPTS prompts at their own temperature, 2 tokens
    each (a large prefill's first call is not timed); on CPU only the short greedy request."""
    from harness.app import WARM_PROMPTS, warm_up

    calls = []
    llm = SimpleNamespace(generate=lambda prompts, params: calls.append((prompts, params)))
    work = build_workload({**SERVE, "num_prompts": 40, "temperature": 0.6}, "cpu", 0, 100)
    warm_up(llm, work, device)
    assert calls[0][0] == [work.prompts[0][:64]] and calls[0][1].temperature == 0
    assert len(calls) == (2 if device == "cuda" else 1)
    if device == "cuda":
        assert calls[1][0] == work.prompts[:WARM_PROMPTS]
        assert {(p.max_tokens, p.temperature) for p in calls[1][1]} == {(2, 0.6)}


def test_ideals_idle_gap_is_known_from_the_workload_and_seed_before_any_run():
    """Session 22's new-user trial: ``-m control=shm,ideal tp=2 workload=serve workload.request_rate=0.01
    workload.num_prompts=3`` ran the shm job (minutes of arrivals) before ideal's job refused its 120 s gap; the
    checks before the first job draw the same trace the job does."""
    from harness.workloads import idle_gap_problem

    w = {"name": "serve", "kind": "serve", "num_prompts": 3, "min_input_len": 4, "max_input_len": 8,
         "min_output_len": 2, "max_output_len": 4, "max_token_id": 99, "temperature": 0.0, "ignore_eos": True,
         "request_rate": 0.01, "burstiness": 1.0}
    problem = idle_gap_problem(w, 0, "ideal", 2, 60.0)
    assert problem.startswith("control=ideal: the trace has a 178 s wait for an arrival") and problem.endswith("178")
    arrivals = build_workload(w, "cpu", 0, 100).arrivals  # the job's trace, its wait for the first arrival included
    assert f"a {np.diff([0.0, *arrivals]).max():.0f} s wait" in problem
    assert idle_gap_problem({**w, "num_prompts": 1}, 0, "ideal", 2, 60.0).endswith("above 100")  # 1 / 0.01 s
    assert idle_gap_problem(w, 0, "ideal", 2, 179.0) is None and idle_gap_problem(w, 0, "shm", 2, 60.0) is None
    assert idle_gap_problem(w, 0, "ideal", 1, 60.0) is None  # tp=1: no worker waits in a collective
