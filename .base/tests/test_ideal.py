"""control=ideal: a recording pass, then a timed pass in which workers replay the messages from memory."""

from __future__ import annotations

import hashlib

import pytest
from control_plane_worker import start_echo_workers, stop_echo_workers
from helpers import prompts_of_lengths

from backends.ideal import IdealControlPlane, ScheduleMismatch
from engine import LLM, SamplingParams
from harness.metrics import control_metrics


def messages(start: int, count: int) -> list[tuple]:
    return [("check", start + i, bytes([i % 256]) * i, hashlib.sha256(bytes([i % 256]) * i).hexdigest())
            for i in range(count)]


@pytest.mark.slow
@pytest.mark.parametrize("inner", ["pipe", "ring"])
def test_replayed_messages_arrive_in_order_with_nothing_sent(inner):
    """200 live messages (recorded), then the same 200 replayed: every worker sees 400 in order, intact; the
    replayed ones cost the transport nothing (no receive sample) and rank 0 only checks them."""
    cp = IdealControlPlane(3, timeout_s=30, inner=inner)
    procs, results = start_echo_workers(cp, (1, 2))
    try:
        cp.start_recording()
        live = [cp.send(*m) for m in messages(0, 200)]
        assert cp.stop_recording() == 200 and min(live) > 0
        # the replay checks against the recording, so the indices must be what was recorded: the echo
        # worker expects 200..399, so record those instead
        cp.start_recording()
        recorded = messages(200, 200)
        cp._recording = list((m[0], m[1:]) for m in recorded)  # what sending them would have recorded
        cp._sizes = live  # ... and the sizes the inner plane sent them at
        cp.stop_recording()
        assert cp.start_replay() == 200
        inner_sent = len(cp.inner.send_stats.ns)
        replayed = [cp.send(*m) for m in recorded]
        cp.finish_replay()
        assert len(cp.inner.send_stats.ns) == inner_sent, "a replayed message travelled"
        # its bytes are what a plane sent, not its raw arguments (it read 102 B beside every plane's 135)
        assert replayed == live and list(cp.send_stats.nbytes[-200:]) == live
        cp.send_exit()
        assert sorted(results.get(timeout=60) for _ in procs) == [(1, 400, []), (2, 400, [])]
    finally:
        stop_echo_workers(procs, cp)


def test_a_step_that_differs_from_the_recording_is_refused_in_one_line():
    cp = IdealControlPlane(1)  # no workers: the checks are rank 0's alone
    cp.start_recording()
    cp.send("run", b"\x01\x02")
    cp.send("run", b"\x03")
    cp.stop_recording()
    cp.start_replay()
    cp.send("run", b"\x01\x02")
    with pytest.raises(ScheduleMismatch, match=r"^ideal: step 1 of the timed pass is run \(2 bytes\) where the "
                                               r"recording has run \(1 bytes\)") as e:
        cp.send("run", b"\x03\x04")
    assert "\n" not in str(e.value)
    cp.start_recording()
    cp.send("run", b"\x05")
    cp.stop_recording()
    cp.start_replay()
    with pytest.raises(ScheduleMismatch, match="sent 0 messages where the recording has 1"):
        cp.finish_replay()
    cp.close()


@pytest.mark.slow
@pytest.mark.parametrize("async_scheduling", [True, False])
def test_engine_under_ideal_gives_the_same_tokens_and_refuses_another_schedule(tiny_untied, async_scheduling):
    prompts = prompts_of_lengths([4, 30, 65], seed=3)
    params = SamplingParams(temperature=0.8, max_tokens=12, ignore_eos=True)
    options = dict(tensor_parallel_size=2, device="cpu", kvcache_block_size=16, max_model_len=256,
                   max_num_batched_tokens=256, async_scheduling=async_scheduling, seed=3)
    with LLM(tiny_untied, control="shm", **options) as llm:
        want = [o["token_ids"] for o in llm.generate(prompts, params)]
    with LLM(tiny_untied, control="ideal", **options) as llm:
        llm.control.start_recording()
        recorded = [o["token_ids"] for o in llm.generate(prompts, params)]
        llm.control.stop_recording()
        steps = len(llm.steps)
        # recorded messages travel: the worker times each step's launch from rank 0's send
        assert len(llm.collect_control_stats()["recv"][1]["launch_ns"]) == steps
        llm.reset()
        llm.control.start_replay()
        replayed = [o["token_ids"] for o in llm.generate(prompts, params)]
        llm.control.finish_replay()
        assert recorded == replayed == want
        replay_stats = llm.collect_control_stats()
        assert len(replay_stats["send"]["ns"]) == len(llm.steps)  # rank 0 checked every step
        # replayed: no send to time from, so neither a launch lag nor a one-way latency (blank, not 0)
        assert replay_stats["recv"][1]["launch_ns"] == [] and replay_stats["recv"][1]["ns"] == []
        row = control_metrics(replay_stats, llm.steps)
        assert row["ctrl_oneway_us_p50"] is None and row["ctrl_oneway_over_step_pct"] is None
        llm.reset()
        llm.control.start_recording()
        llm.generate(prompts, params)
        llm.control.stop_recording()
        llm.control.start_replay()  # no reset: the prefix cache is warm, so the first prefill differs
        with pytest.raises(ScheduleMismatch, match="step 0 of the timed pass"):
            llm.generate(prompts, params)
