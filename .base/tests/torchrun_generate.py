"""Run by torchrun in the multi-node tests: every rank builds the same EngineConfig; rank 0 generates greedily
and writes the token ids as JSON, the other ranks serve it (``engine.serve_worker``).

    torchrun ... tests/torchrun_generate.py CHECKPOINT CONTROL OUT.json PROMPTS.json
"""

import json
import sys

from engine import LLM, EngineConfig, SamplingParams, serve_worker

OPTIONS = dict(device="cpu", dtype="float32", kvcache_block_size=16, max_model_len=256, max_num_batched_tokens=256)


def main(path: str, control: str, out: str, prompts_file: str) -> int:
    config = EngineConfig(path, control=control, tensor_parallel_size=int(__import__("os").environ["WORLD_SIZE"]),
                          **OPTIONS)
    if config.launch.rank != 0:
        return serve_worker(config)
    prompts = json.load(open(prompts_file))
    with LLM(path, control=control, tensor_parallel_size=config.tensor_parallel_size, **OPTIONS) as llm:
        outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True))
        info = llm.describe()
        clock, nodes = (info["clock_sync"], info["clock_uncertainty_us"]), info["nodes"]
    json.dump({"tokens": [o["token_ids"] for o in outs], "clock": clock, "nodes": nodes}, open(out, "w"))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
