"""Profile rank 0's engine steps on the GPU: fill the engine with a workload's requests, run ``--skip``
steps, then record ``--steps`` steps with torch.profiler. Prints the wall time per step, rank 0's GPU kernel
time per step (the rest is its GPU idling: on the CPU, or on the other ranks in a collective), and the top
kernels by GPU time and by CPU time.

    python scripts/profile_steps.py [--model qwen3-0.6b] [--workload bench|latency] [--num-seqs 1] [--tp 2]
                                    [--skip 200] [--steps 20] [--sync] [--all-reduce auto|nccl|symm_mem]
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
    ap.add_argument("--model", default="qwen3-0.6b")
    ap.add_argument("--workload", default="bench")
    ap.add_argument("--num-seqs", type=int, help="latency workload: the batch")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--skip", type=int, default=200)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--sync", action="store_true", help="async_scheduling=false")
    ap.add_argument("--all-reduce", default="auto")
    args = ap.parse_args()
    preset = yaml.safe_load(open(f"conf/model/{args.model}.yaml"))["preset"]
    path = materialize(args.model, preset, seed=0)
    w = yaml.safe_load(open(f"conf/workload/{args.workload}.yaml"))
    if args.num_seqs:
        w["num_seqs"] = args.num_seqs
    work = build_workload(w, "cuda", 0, preset["vocab_size"])
    with LLM(path, tensor_parallel_size=args.tp, device="cuda", async_scheduling=not args.sync,
             all_reduce=args.all_reduce) as llm:
        for p, sp in zip(work.prompts, work.params):
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
        used = llm.runner.all_reduce
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    gpu_ms = sum(e.device_time for e in kernels) / 1e3 / args.steps
    print(f"{args.model} tp={args.tp} all_reduce={used} {'sync' if args.sync else 'async'}: {running} running; "
          f"per step: wall {wall_ms:.3f} ms, rank 0 GPU kernels {gpu_ms:.3f} ms ({100 * gpu_ms / wall_ms:.0f}% busy), "
          f"{len(kernels) / args.steps:.0f} kernels")
    print(prof.key_averages().table(sort_by="device_time_total", row_limit=15, max_name_column_width=70))
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10, max_name_column_width=70))


if __name__ == "__main__":
    main()
