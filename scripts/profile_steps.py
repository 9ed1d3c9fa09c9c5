"""Profile the engine inside nano-vllm's benchmark on the GPU: run the bench requests, and after
``--skip`` steps record ``--steps`` engine steps with torch.profiler. Prints the wall time per step, the
GPU kernel time per step (the rest is the GPU idling on the CPU) and the top kernels.

    python scripts/profile_steps.py [--skip 200] [--steps 20] [--sync]
"""

import argparse
import time

import torch
import yaml
from torch.profiler import ProfilerActivity, profile

from engine import LLM
from engine.sequence import Sequence
from harness.checkpoint import materialize
from harness.workloads import build_workload


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip", type=int, default=200)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--sync", action="store_true", help="async_scheduling=false")
    args = ap.parse_args()
    preset = yaml.safe_load(open("conf/model/qwen3-0.6b.yaml"))["preset"]
    path = materialize("qwen3-0.6b", preset, seed=0)
    w = build_workload(yaml.safe_load(open("conf/workload/bench.yaml")), "cuda", 0, preset["vocab_size"])
    with LLM(path, device="cuda", async_scheduling=not args.sync) as llm:
        for p, sp in zip(w.prompts, w.params):
            llm.scheduler.add(Sequence(p, sp, llm.config.kvcache_block_size))
        for _ in range(args.skip):
            llm.step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t = time.perf_counter()
            for _ in range(args.steps):
                llm.step()
            torch.cuda.synchronize()
            wall_ms = (time.perf_counter() - t) * 1e3 / args.steps
        running = len(llm.scheduler.running)
        while not llm.scheduler.is_finished() or llm._in_flight is not None:
            llm.step()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    gpu_ms = sum(e.device_time for e in kernels) / 1e3 / args.steps
    print(f"{running} running; per step: wall {wall_ms:.2f} ms, GPU kernels {gpu_ms:.2f} ms "
          f"({100 * gpu_ms / wall_ms:.0f}% busy), {len(kernels) / args.steps:.0f} kernels")
    print(prof.key_averages().table(sort_by="device_time_total", row_limit=15, max_name_column_width=70))
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10, max_name_column_width=70))


if __name__ == "__main__":
    main()
