"""The CUDA path against transformers (skipped where there is no GPU; run on the H200 machine)."""

from __future__ import annotations

import pytest
import torch

from engine import LLM, SamplingParams
from conftest import hf_greedy
from test_correctness import prompts_of_lengths

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_cuda_float32_greedy_matches_transformers(tiny_untied):
    prompts = prompts_of_lengths([3, 17, 40, 90])
    want = hf_greedy(tiny_untied, prompts, 24)
    with LLM(tiny_untied, device="cuda", dtype="float32", kvcache_block_size=16, max_model_len=256,
             max_num_batched_tokens=512, gpu_memory_utilization=0.3) as llm:
        got = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))
    assert [o["token_ids"] for o in got] == want
