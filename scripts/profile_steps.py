"""Profile rank 0's engine steps on the GPU: fill the engine with a workload's requests, run ``--skip``
steps, then record ``--steps`` steps with torch.profiler. Prints the wall time per step, rank 0's GPU kernel
time per step (the rest is its GPU idling: on the CPU, or on the other ranks in a collective), and the top
kernels by GPU time and by CPU time, and rank 0's GPU time per step by kind of kernel (GEMM, GEMV, decode
attention, prefill attention, all-reduce, fused elementwise, other). With ``--prefill-steps N`` the first N
steps (the prefills of a workload that admits every request at once, such as ``bench``) are profiled too,
in a window of their own. Before the profiler, without it: the step's anatomy (``anatomy``).

    python scripts/profile_steps.py [--model qwen3-0.6b] [--workload bench|latency] [--num-seqs 1] [--tp 2]
                                    [--skip 200] [--steps 20] [--prefill-steps 0] [--sync]
                                    [--all-reduce auto|nccl|symm_mem]
"""

import re
import statistics
import time

import torch
from omegaconf import OmegaConf
from torch.profiler import ProfilerActivity, profile

from common import OneLineParser
from engine import LLM
from engine.sequence import Sequence
from harness.checkpoint import materialize
from harness.preflight import hydra_compose
from harness.workloads import build_workload

# Kind of each kernel, by name (first match wins): cuBLAS / CUTLASS GEMMs, this engine's Triton GEMV and
# decode-attention kernels, flash-attention (prefill), the all-reduces (symmetric memory or NCCL), the
# torch.compile'd elementwise kernels (names start "triton_").
KINDS = [("all-reduce", r"all_reduce|nccl|AllReduce"), ("decode attention", r"_paged_decode"),
         ("prefill attention", r"flash|fmha|attention"), ("GEMV", r"_gemv"),
         ("GEMM", r"nvjet|gemm|cutlass|sm90_xmma|cublas|splitK"), ("fused elementwise", r"^triton_"),
         ("other", r"")]


def by_kind(kernels, steps: int) -> str:
    """One line per kind: rank 0's GPU ms per step in that kind and its share of the kernel time."""
    ms = dict.fromkeys((k for k, _ in KINDS), 0.0)
    for e in kernels:
        kind = next(k for k, pattern in KINDS if re.search(pattern, e.name))
        ms[kind] += e.device_time / 1e3 / steps
    total = sum(ms.values()) or 1.0
    return "\n".join(f"  {k:18s} {v:8.3f} ms/step {100 * v / total:5.1f}%" for k, v in ms.items())


def exposed(spans: list[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """Each kernel's share of the stream's critical path: ``spans`` (name, start, end in us, one stream) sorted by
    end -> (name, idle us before it, exposed us). A kernel launched early (PDL) overlaps the one before; what it
    adds to the step is its end minus the later of its start and the previous kernel's end."""
    out, last = [], None
    for name, start, end in sorted(spans, key=lambda s: s[2]):
        begin = start if last is None else max(start, last)
        out.append((name, 0.0 if last is None else max(0.0, start - last), end - begin))
        last = end
    return out


def by_stage(rows: list[tuple[str, float, float]], steps: int) -> str:
    """``exposed``'s rows of ``steps`` equal steps -> the step's critical path: each stage of the repeating layer
    (the shortest period of kernel names in the step's middle), us averaged over layers and steps, then the
    kernels before and after the repeats, and the idle time (the gaps between steps included). A layer that runs
    other kernels (layer 0, whose QKV also normalises) is not a repeat: it counts before or after them, and the
    repeat may then start inside a layer (the stages rotated; their us and the layer's sum unchanged)."""
    n = len(rows) // steps
    names = [r[0] for r in rows[:n]]
    if n * steps != len(rows) or any(r[0] != names[i % n] for i, r in enumerate(rows)):
        return "critical path: the steps ran different kernels (a split count changed?): move the window"
    per_pos = [statistics.mean(rows[s * n + j][2] for s in range(steps)) for j in range(n)]
    mid = names[n // 4: 3 * n // 4]
    period = next((p for p in range(1, len(mid) // 2 + 1) if mid[p:] == mid[:-p]), 0)
    if not period:
        return f"critical path: {sum(per_pos):.1f} us a step exposed; no kernel pattern repeats in the step's middle"
    first = n // 4
    while first > 0 and names[first - 1] == names[first - 1 + period]:
        first -= 1
    layers = 1
    while names[first + layers * period: first + (layers + 1) * period] == names[first: first + period]:
        layers += 1
    end = first + layers * period
    lines = [f"critical path: {sum(per_pos):.1f} us a step exposed, {sum(r[1] for r in rows) / steps:.1f} idle; "
             f"{layers} repeats (layers) of {period} kernels:"]
    for k in range(period):
        us = statistics.mean(per_pos[first + k: end: period])
        lines.append(f"  {k}: {names[first + k][:44]:44s} {us:6.2f} us")
    lines.append(f"  one layer {sum(per_pos[first:end]) / layers:.2f} us; before the repeats "
                 f"{sum(per_pos[:first]):.1f} us ({first} kernels), after {sum(per_pos[end:]):.1f} us "
                 f"({n - end} kernels)")
    return "\n".join(lines)


def anatomy(llm, steps: int) -> str:
    """Wall time per step, the host's share of it (launching the step; the rest is waiting for the tokens),
    and rank 0's decode CUDA graph replayed alone back to back (its GPU time with no host in the way)."""
    from gpu_only import graph_ms

    from engine.step_batch import InFlightStep

    spent = {"launch": 0.0, "wait": 0.0}

    def timed(name, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t
        return wrapper

    launch, wait = llm._launch, InFlightStep.wait_tokens
    llm._launch, InFlightStep.wait_tokens = timed("launch", launch), timed("wait", wait)
    try:
        t = time.perf_counter()
        for _ in range(steps):
            llm.step()
        wall = (time.perf_counter() - t) * 1e3 / steps
    finally:
        llm._launch, InFlightStep.wait_tokens = launch, wait
    line = (f"anatomy: wall {wall:.3f} ms/step; launch (host) {spent['launch'] * 1e3 / steps:.3f}, waiting for the "
            f"tokens {spent['wait'] * 1e3 / steps:.3f}")
    graphs = getattr(llm.runner, "graphs", None)
    n = len(llm.scheduler.running)
    if graphs is not None and graphs.can_run(n):
        graph = graphs.graph_for(n, max(len(s) for s in llm.scheduler.running))
        line += f"; the batch-{n} step's graph alone {graph_ms(graph, steps):.3f} ms/replay"
    return line


def window(llm, steps: int):
    """Profile ``steps`` engine steps: (profiler, wall ms per step, CUDA kernel events)."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t = time.perf_counter()
        for _ in range(steps):
            llm.step()
        torch.cuda.synchronize()
        wall_ms = (time.perf_counter() - t) * 1e3 / steps
    return prof, wall_ms, [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def open_engine(args):
    """An ``LLM`` for ``args.model`` (its preset built once) with ``args.workload``'s requests queued, not
    yet stepped; the caller enters it (``with open_engine(args) as llm``)."""
    with hydra_compose() as compose:  # the presets as the harness composes them (schema defaults included)
        cfg = compose([f"model={args.model}", f"workload={args.workload}"])
    preset = OmegaConf.to_container(cfg.model.preset)
    path = materialize(args.model, preset, seed=0)
    w = OmegaConf.to_container(cfg.workload)
    if args.num_seqs:
        w["num_seqs"] = args.num_seqs
    work = build_workload(w, "cuda", 0, preset["vocab_size"])
    llm = LLM(path, tensor_parallel_size=args.tp, device="cuda", async_scheduling=not args.sync,
              all_reduce=args.all_reduce, compile=getattr(args, "compile", True))
    for p, sp in zip(work.prompts, work.params):
        llm.scheduler.add(Sequence(p, sp, llm.config.kvcache_block_size))
    return llm


def main():
    ap = OneLineParser()
    ap.add_argument("--model", default="qwen3-0.6b")
    ap.add_argument("--workload", default="bench")
    ap.add_argument("--num-seqs", type=int, help="latency workload: the batch")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--skip", type=int, default=200)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--prefill-steps", type=int, default=0, help="also profile the first N steps on their own")
    ap.add_argument("--sync", action="store_true", help="async_scheduling=false")
    ap.add_argument("--all-reduce", default="auto")
    args = ap.parse_args()
    from gpu_only import require_cuda

    require_cuda(args.tp)
    with open_engine(args) as llm:
        prefill = window(llm, args.prefill_steps) if args.prefill_steps else None
        for _ in range(args.skip - args.prefill_steps):
            llm.step()
        if len(llm.scheduler.running) == 0:  # e.g. latency's 128 tokens within --skip
            raise SystemExit(f"error: the workload had finished after {args.skip} steps: lower --skip")
        print(anatomy(llm, args.steps))
        prof, wall_ms, kernels = window(llm, args.steps)
        running = len(llm.scheduler.running)
        while not llm.scheduler.is_finished() or llm._in_flight is not None:
            llm.step()
        used = llm.runner.all_reduce
    head = f"{args.model} tp={args.tp} all_reduce={used} {'sync' if args.sync else 'async'}"
    if prefill is not None:
        p_prof, p_wall, p_kernels = prefill
        p_gpu = sum(e.device_time for e in p_kernels) / 1e3 / args.prefill_steps
        print(f"{head}: first {args.prefill_steps} steps: wall {p_wall:.3f} ms/step, rank 0 GPU kernels "
              f"{p_gpu:.3f} ms/step ({100 * p_gpu / p_wall:.0f}% busy)")
        print(by_kind(p_kernels, args.prefill_steps))
        print(p_prof.key_averages().table(sort_by="device_time_total", row_limit=10, max_name_column_width=70))
    gpu_ms = sum(e.device_time for e in kernels) / 1e3 / args.steps
    print(f"{head}: {running} running; "
          f"per step: wall {wall_ms:.3f} ms, rank 0 GPU kernels {gpu_ms:.3f} ms ({100 * gpu_ms / wall_ms:.0f}% busy), "
          f"{len(kernels) / args.steps:.0f} kernels")
    print(by_kind(kernels, args.steps))
    print(by_stage(exposed([(e.name, e.time_range.start, e.time_range.end) for e in kernels]), args.steps))
    print(prof.key_averages().table(sort_by="device_time_total", row_limit=15, max_name_column_width=70))
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10, max_name_column_width=70))


if __name__ == "__main__":
    main()
