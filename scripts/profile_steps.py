"""Profile one prefill step and one decode step of the engine on the GPU (torch.profiler, top ops)."""

import random
import time

import torch
from torch.profiler import ProfilerActivity, profile

from engine import LLM, SamplingParams
from engine.sequence import Sequence
from harness.checkpoint import materialize
import yaml


def main():
    preset = yaml.safe_load(open("conf/model/qwen3-0.6b.yaml"))["preset"]
    path = materialize("qwen3-0.6b", preset, seed=0)
    llm = LLM(path, device="cuda")
    rng = random.Random(0)
    seqs = [Sequence([rng.randint(0, 10000) for _ in range(560)], SamplingParams(), 256) for _ in range(29)]
    for s in seqs:
        llm.block_manager.allocate(s)
    views = [s.step_view() for s in seqs]
    for _ in range(2):
        llm.runner.run(views, True)
    torch.cuda.synchronize()
    t = time.perf_counter()
    llm.runner.run(views, True)
    torch.cuda.synchronize()
    print(f"prefill step, 29 x 560 tokens: {(time.perf_counter() - t) * 1e3:.1f} ms")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        llm.runner.run(views, True)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=60))
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=8, max_name_column_width=60))
    llm.shutdown()


if __name__ == "__main__":
    main()
