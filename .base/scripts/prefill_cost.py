"""What a short prefill costs on the host and the GPU: ``generate`` of one token for fresh 32-token prompts
(each a prefill and nothing else), timed, then one under cProfile and one under torch.profiler.

    python scripts/prefill_cost.py [--model qwen3-0.6b] [--input-len 32] [--no-compile] [--no-profile]
"""

import argparse
import cProfile
import pstats
import time

import torch
from torch.profiler import ProfilerActivity, profile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-0.6b")
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--no-compile", dest="compile", action="store_false", help="llm.compile=false: eager elementwise")
    ap.add_argument("--no-profile", dest="profile", action="store_false", help="the timings only")
    args = ap.parse_args()
    from gpu_only import require_cuda

    require_cuda()
    from profile_steps import open_engine

    from engine import SamplingParams

    args.workload, args.num_seqs, args.tp, args.sync, args.all_reduce = "latency", 1, 1, False, "auto"
    with open_engine(args) as llm:
        while llm.has_unfinished_requests():  # the workload's queued request: a warm-up
            llm.step()
        rng = torch.Generator().manual_seed(0)
        prompts = [torch.randint(0, 10000, (args.input_len,), generator=rng).tolist() for _ in range(14)]
        one = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
        for p in prompts[:2]:
            llm.generate([p], one)
        ms = []
        for p in prompts[2:12]:
            torch.cuda.synchronize()
            t = time.perf_counter()
            llm.generate([p], one)
            ms.append((time.perf_counter() - t) * 1e3)
        print(f"{args.model}, compile={args.compile}: generate(1 token) of a fresh {args.input_len}-token prompt, ms:",
              " ".join(f"{x:.2f}" for x in ms))
        if not args.profile:
            return
        prof = cProfile.Profile()
        prof.runcall(llm.generate, [prompts[12]], one)
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as tprof:
            llm.generate([prompts[13]], one)
    print(tprof.key_averages().table(sort_by="cpu_time_total", row_limit=25, max_name_column_width=60))
    print(tprof.key_averages().table(sort_by="device_time_total", row_limit=12, max_name_column_width=60))


if __name__ == "__main__":
    main()
