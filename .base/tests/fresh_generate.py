"""Greedy tokens from an engine in a process of its own (symmetric memory is set up once per process):
    python tests/fresh_generate.py '{"model": PATH, "tensor_parallel_size": 2, ...}' PROMPTS_JSON
prints {"tokens": [...], "all_reduce": "symm_mem" | "nccl" | ...} as JSON."""

import json
import sys

from engine import LLM, SamplingParams

if __name__ == "__main__":
    options, prompts = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    params = SamplingParams(temperature=options.pop("temperature", 0.0), max_tokens=24, ignore_eos=True)
    with LLM(**options) as llm:
        tokens = [o["token_ids"] for o in llm.generate(prompts, params)]
        print(json.dumps({"tokens": tokens, "all_reduce": llm.runner.all_reduce}))
