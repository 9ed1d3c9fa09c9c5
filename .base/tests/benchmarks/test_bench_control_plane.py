"""CI regression benchmarks (pytest-benchmark): the control plane's round trip for every backend at tp=2,
and one engine decode step of the small model. Times are recorded (``--benchmark-json``), never gated: a
2-core CI machine is too noisy. The gates are what does not drift with load: bytes per message and
control-plane calls per step."""

from __future__ import annotations

import pickle

import pytest
import torch.distributed as dist

from backends import available
from backends.base import STAMP
from engine import LLM, SamplingParams
from engine.sequence import Sequence
from harness.broadcast import BroadcastGroup, step_message

pytestmark = pytest.mark.slow  # every benchmark starts processes


@pytest.mark.parametrize("control", [c for c in available() if c != "ideal"])  # ideal: nothing to time alone
def test_broadcast_round_trip_decode_64(benchmark, control):
    """rank 0 sends the engine's decode message for 64 sequences; both ranks meet in a barrier."""
    message = step_message(64, 1024, False, 256)
    expected = STAMP.size + len(pickle.dumps((message[0], message[1:]), protocol=pickle.HIGHEST_PROTOCOL))
    benchmark.group = "broadcast round trip, decode-64, tp=2"  # the table compares the planes with each other
    benchmark.extra_info.update(control=control, tp=2, message_bytes=expected)
    group, rounds = BroadcastGroup(control, 2, {}, 30), []
    try:  # the rounds run, counted: 220, or 1 under --benchmark-disable (pytest-benchmark's plain-test mode)
        benchmark.pedantic(lambda: rounds.append(group.run(message, 1, 0.0)), rounds=200, warmup_rounds=20)
        stats = group.collect_stats()
        send, recv = stats["send"], stats["recv"]
    finally:
        group.close()
    assert set(send["nbytes"]) == {expected}  # same bytes on the wire, whatever the backend or the load
    assert len(recv[1]["ns"]) == len(send["ns"]) == len(rounds)  # one message per round, each delivered once
    assert not dist.is_initialized()


def test_engine_decode_step(benchmark, tiny_untied):
    benchmark.group = "engine decode step, 8 sequences, tp=2"
    with LLM(tiny_untied, tensor_parallel_size=2, device="cpu", kvcache_block_size=16, max_model_len=1024,
             max_num_batched_tokens=1024) as llm:
        params = SamplingParams(temperature=0, max_tokens=900, ignore_eos=True)
        for i in range(8):
            llm.scheduler.add(Sequence([i + 1] * 20, params, llm.config.kvcache_block_size))
        llm.step()  # the prefill
        calls_before, rounds = len(llm.control.send_stats.ns), []
        benchmark.pedantic(lambda: rounds.append(llm.step()), rounds=60, warmup_rounds=5)
        llm.finish_step()  # async scheduling: the last step launched is still in flight
        calls = len(llm.control.send_stats.ns) - calls_before
        decode = [s for s in llm.steps if not s.is_prefill]
        most = max(s.message_bytes for s in decode)
        benchmark.extra_info.update(control=llm.config.control, tp=2, message_bytes=most)
    assert calls == len(decode) == len(rounds) > 0  # exactly one control-plane message per decode step
    # A decode message carries per sequence its length, last token and block count (int32 each) and its
    # block table (int32 per block; at most 6 blocks of 16 here), plus a 16-byte header and the pickle frame.
    # A change that starts shipping whole token lists or Sequence objects grows it past this bound.
    assert max(s.message_bytes for s in decode) <= 128 + 8 * (12 + 4 * 6)

