"""Greedy tokens of the tensor-parallel engine equal transformers' generate on the same checkpoint."""

from __future__ import annotations

import time

import pytest
from helpers import hf_greedy, prompts_of_lengths

from backends import available
from engine import LLM, SamplingParams

MAX_NEW = 24


@pytest.mark.parametrize("tp", [1, pytest.param(2, marks=pytest.mark.slow)])
@pytest.mark.parametrize("checkpoint", ["tiny_untied", "tiny_tied"])
def test_greedy_matches_transformers(tp, checkpoint, request):
    path = request.getfixturevalue(checkpoint)
    prompts = prompts_of_lengths([1, 7, 16, 33, 70])
    want = hf_greedy(path, prompts, MAX_NEW)
    with LLM(path, tensor_parallel_size=tp, device="cpu", dtype="float32", kvcache_block_size=16,
             max_model_len=256, max_num_batched_tokens=256) as llm:
        got = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True))
    for i, (g, w) in enumerate(zip(got, want)):
        assert g["token_ids"] == w, f"prompt {i} (len {len(prompts[i])}) differs"


def test_async_scheduling_on_cpu_stamps_each_token_when_made_not_after_the_next_step(tiny_untied):
    # A CPU launch computes its step; tokens read after the next launch once took its time (TTFT + 1 step, a
    # last TPOT of ~0). A token's time must precede the launch of the step after the one that made it.
    with LLM(tiny_untied, device="cpu", max_model_len=128, async_scheduling=True) as llm:
        launched, launch = [], llm._launch
        llm._launch = lambda: (launched.append(time.perf_counter()), launch())[1]
        out = llm.generate(prompts_of_lengths([9]), SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
    times = out[0]["token_times_s"]
    assert len(times) == 3 and len(launched) >= 3
    assert all(t < nxt for t, nxt in zip(times, launched[1:], strict=False))
    assert times[1] > launched[1] and times[2] > launched[2]  # ... and follows its own step's launch


@pytest.mark.parametrize("tp,async_scheduling", [(1, True), pytest.param(2, True, marks=pytest.mark.slow),
                                                 pytest.param(2, False, marks=pytest.mark.slow)])
def test_prefix_cache_hit_and_preemption(tp, async_scheduling, tiny_untied):
    shared = prompts_of_lengths([32], seed=1)[0]
    prompts = [shared + tail for tail in prompts_of_lengths([4, 4, 4], seed=2)]
    max_new = 40
    want = hf_greedy(tiny_untied, prompts, max_new)
    # 7 blocks of 16 tokens: the three 36-token prompts start together in 5 (2 shared + 1 each); grown to
    # 76 tokens they would need 2 + 3 * 3 = 11, so the scheduler must preempt; one alone needs 5.
    with LLM(tiny_untied, tensor_parallel_size=tp, device="cpu", kvcache_block_size=16, num_kvcache_blocks=7,
             max_model_len=256, max_num_batched_tokens=256, async_scheduling=async_scheduling) as llm:
        params = SamplingParams(temperature=0, max_tokens=max_new, ignore_eos=True)
        first = llm.generate(prompts, params)
        hits_before = llm.block_manager.num_cache_hit_tokens
        second = llm.generate(prompts[:1], params)  # its 32-token prefix (2 full blocks) is cached now
        hits_after = llm.block_manager.num_cache_hit_tokens
    assert sum(o["num_preemptions"] for o in first) > 0, "the small KV cache should have forced a preemption"
    assert hits_before >= 2 * 32, "the shared 32-token prefix should have hit the prefix cache"
    assert hits_after - hits_before >= 32
    assert [o["token_ids"] for o in first] == want
    assert second[0]["token_ids"] == want[0]


@pytest.mark.slow
@pytest.mark.parametrize("async_scheduling", [True, False])
def test_eos_stops_each_sequence_at_its_first_eos(async_scheduling, tiny_untied):
    prompts = prompts_of_lengths([5, 9, 20, 40])
    full = hf_greedy(tiny_untied, prompts, MAX_NEW)
    eos = {full[0][6], full[2][3]}  # two ids (as Qwen3's generation_config lists): both must stop a sequence
    want = [f[:min(f.index(e) for e in eos if e in f) + 1] if eos & set(f) else f for f in full]
    with LLM(tiny_untied, tensor_parallel_size=2, device="cpu", dtype="float32", kvcache_block_size=16,
             max_model_len=256, max_num_batched_tokens=256, async_scheduling=async_scheduling) as llm:
        llm.scheduler.eos_token_ids = eos
        got = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=MAX_NEW))
        assert llm.block_manager.num_free_blocks == llm.num_kvcache_blocks
    assert [g["token_ids"] for g in got] == want
    assert [len(g["token_times_s"]) for g in got] == [len(w) for w in want]


def test_eos_ids_come_from_config_and_generation_config(tiny_untied, tmp_path):
    import json
    import shutil

    from engine import EngineConfig

    shutil.copy(f"{tiny_untied}/config.json", tmp_path / "config.json")
    (tmp_path / "model.safetensors").write_bytes(b"")
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [5, 7]}))
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["eos_token_id"] = 9
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert EngineConfig(str(tmp_path), device="cpu").eos_token_ids == {5, 7, 9}


def test_sampling_is_seeded_and_respects_max_tokens(tiny_untied):
    prompts = prompts_of_lengths([5, 12])
    runs = []
    for _ in range(2):
        with LLM(tiny_untied, device="cpu", kvcache_block_size=16, max_model_len=256, max_num_batched_tokens=256,
                 seed=7) as llm:
            runs.append(llm.generate(prompts, [SamplingParams(temperature=1.0, max_tokens=10, ignore_eos=True),
                                               SamplingParams(temperature=0.8, max_tokens=3, ignore_eos=True)]))
    assert [o["token_ids"] for o in runs[0]] == [o["token_ids"] for o in runs[1]]
    assert [len(o["token_ids"]) for o in runs[0]] == [10, 3]
    assert all(len(o["token_times_s"]) == len(o["token_ids"]) for o in runs[0])


@pytest.mark.slow
@pytest.mark.parametrize("control", available())
def test_every_control_plane_gives_identical_greedy_tokens(control, tiny_untied):
    prompts = prompts_of_lengths([4, 30, 65], seed=3)
    want = hf_greedy(tiny_untied, prompts, MAX_NEW)
    with LLM(tiny_untied, tensor_parallel_size=2, control=control, device="cpu", kvcache_block_size=16,
             max_model_len=256, max_num_batched_tokens=256) as llm:
        got = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True))
    assert [o["token_ids"] for o in got] == want


@pytest.fixture(scope="module")
def tiny_four_kv_heads(model_cache) -> str:
    from helpers import TINY

    from harness.checkpoint import materialize

    return materialize("tiny-kv4", {**TINY, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 16},
                       seed=2, root=model_cache)


@pytest.mark.slow
def test_tp4_gives_the_same_greedy_tokens_as_tp1(tiny_four_kv_heads):
    prompts = prompts_of_lengths([3, 25, 60], seed=9)
    outs = []
    for tp in (1, 4):
        with LLM(tiny_four_kv_heads, tensor_parallel_size=tp, device="cpu", kvcache_block_size=16, max_model_len=256,
                 max_num_batched_tokens=256) as llm:
            outs.append([o["token_ids"] for o in llm.generate(prompts, SamplingParams(temperature=0, max_tokens=16,
                                                                                       ignore_eos=True))])
    assert outs[0] == outs[1]


def test_outputs_say_why_they_stopped_and_numpy_prompts_work(tiny_untied):
    import numpy as np

    with LLM(tiny_untied, device="cpu", kvcache_block_size=16, max_model_len=64, max_num_batched_tokens=256) as llm:
        eos = llm.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=8))[0]["token_ids"][2]
        llm.scheduler.eos_token_ids = {eos}
        outs = llm.generate([np.array([1, 2, 3]), list(range(60))], SamplingParams(temperature=0, max_tokens=8))
    assert outs[0]["finish_reason"] == "stop" and outs[0]["token_ids"][-1] == eos
    assert outs[1]["finish_reason"] == "length" and len(outs[1]["token_ids"]) <= 4  # max_model_len cut it


@pytest.mark.slow
def test_seeded_sampling_does_not_depend_on_tp(tiny_untied):
    """Each rank samples its vocabulary shard with noise keyed by the global column: tp=1 and tp=2 draw the
    same tokens from the same seed (float32)."""
    prompts = prompts_of_lengths([5, 12, 30], seed=6)
    params = [SamplingParams(temperature=t, max_tokens=12, ignore_eos=True) for t in (1.0, 0.0, 0.7)]
    outs = []
    for tp in (1, 2):
        with LLM(tiny_untied, tensor_parallel_size=tp, device="cpu", dtype="float32", kvcache_block_size=16,
                 max_model_len=256, max_num_batched_tokens=256, seed=11) as llm:
            outs.append([o["token_ids"] for o in llm.generate(prompts, params)])
    assert outs[0] == outs[1]
    assert outs[0][1] == hf_greedy(tiny_untied, prompts[1:2], 12)[0]  # the greedy row among sampled ones


@pytest.mark.parametrize("tp", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_attention_biases_load_and_match_transformers(tp, tmp_path):
    """Qwen3 with ``attention_bias``: transformers gives q/k/v *and* o_proj a bias (zero at init, so drawn here)."""
    import torch
    from helpers import TINY
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(3)
    model = Qwen3ForCausalLM(Qwen3Config(**TINY, attention_bias=True))
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            torch.nn.init.normal_(p, std=0.3)
    model.save_pretrained(tmp_path)
    prompts = prompts_of_lengths([3, 17, 40])
    want = hf_greedy(str(tmp_path), prompts, MAX_NEW)
    with LLM(str(tmp_path), tensor_parallel_size=tp, device="cpu", dtype="float32", kvcache_block_size=16,
             max_model_len=256, max_num_batched_tokens=256) as llm:
        got = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True))
    assert [g["token_ids"] for g in got] == want
