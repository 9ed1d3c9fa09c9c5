"""Where a batch-N decode step's GPU time goes: rank 0's decode CUDA graph replayed alone, as the engine
captured it, and re-captured with one part of every layer taken out or changed, the rest of the kernels
and their PDL chain as they are. An ablated graph's tokens are garbage: only its time means anything.

    python scripts/step_ablation.py [--model qwen3-0.6b] [--num-seqs 1] [--skip 64] [--replays 200]

Prints one line per variant: ms per replay (median of ``--rounds`` rounds, min-max) and the difference from
the engine's own graph.
"""

import argparse
import contextlib
import statistics
from functools import partial

import torch


@contextlib.contextmanager
def patched(*changes):
    """Set (module, name, value) for the block, then restore each."""
    old = [(m, n, getattr(m, n)) for m, n, _ in changes]
    for m, n, v in changes:
        setattr(m, n, v)
    try:
        yield
    finally:
        for m, n, v in old:
            setattr(m, n, v)


def variants(bs: int, kv_heads: int, device) -> dict:
    """Variant name -> (KV splits, the patches that make it); the attention and norm variants unsplit."""
    from engine.layers import gemm, paged_decode
    from engine.layers.decode_splits import split_counts

    attend, norm_gemv = paged_decode.paged_decode_attention, gemm._norm_gemv
    ones = torch.ones(bs, dtype=torch.int32, device=device)

    def new_token_only(q, k, v, kc, vc, slots, tables, lens, scale, **kw):
        return attend(q, k, v, kc, vc, slots, tables, ones[:len(lens)], scale, **kw)

    def no_norm(h, residual, weight_n, eps, weight, swiglu=False):
        return norm_gemv(h, None, None, 0.0, weight, swiglu)[0], h

    no_attention = (paged_decode, "paged_decode_attention", lambda q, *a, **k: q)
    no_norms = [(gemm, "_norm_gemv", no_norm), (gemm, "_rms_norm", lambda h, r, w, e: (h, h))]
    cap = split_counts(bs, kv_heads, device)[-1]
    return {
        "unsplit": (1, []),
        "split KV, 2 splits": (2, []),
        "split KV, 4 splits": (4, []),
        f"split KV, {cap} splits (the cap)": (cap, []),
        "attention: block_n 128, 4 warps": (1, [(paged_decode, "paged_decode_attention",
                                                     partial(attend, block_n=128, num_warps=4))]),
        "attention: block_n 256, 8 warps": (1, [(paged_decode, "paged_decode_attention",
                                                     partial(attend, block_n=256, num_warps=8))]),
        "attention: the new token only": (1, [(paged_decode, "paged_decode_attention", new_token_only)]),
        "attention: none": (1, [no_attention]),
        "norms: none": (1, no_norms),
        "GEMVs only (no attention, no norms)": (1, [no_attention, *no_norms]),
    }


def capture(graphs, bs: int, split: int):
    """A new graph of ``graphs``' decode step at batch ``bs`` (module patches apply), reading the inputs that the
    engine's last step (of ``bs`` sequences) staged."""
    from engine.staged_inputs import views

    bucket = next(b for b in graphs.buckets if b >= bs)
    st = views(graphs.inputs.device, graphs.inputs.layouts[bucket][0])
    inputs = graphs._inputs(st, split)
    graphs._step(inputs, st)  # warm-up outside capture: compiles the variant's kernels
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graphs._step(inputs, st)
    torch.cuda.synchronize()
    return graph


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-0.6b")
    ap.add_argument("--num-seqs", type=int, default=1)
    ap.add_argument("--skip", type=int, default=64, help="decode steps before measuring (the context grows)")
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from gpu_only import require_cuda

    require_cuda()
    from profile_steps import open_engine

    args.workload, args.tp, args.sync, args.all_reduce = "latency", 1, False, "auto"
    with open_engine(args) as llm:
        for _ in range(args.skip):
            llm.step()
        llm.finish_step()  # no step of the engine's own in flight while the variants run
        graphs, bs = llm.runner.graphs, args.num_seqs
        context = max(len(s) for s in llm.scheduler.running)
        found = {"engine graph": graphs.graph_for(bs, context)}
        for name, (split, changes) in variants(bs, graphs.kv_heads, torch.device("cuda")).items():
            with patched(*changes):
                found[name] = capture(graphs, bs, split)
        compare(found, args.rounds, args.replays, f"{args.model} batch {bs}, context {context} tokens")


def compare(found: dict, rounds: int, replays: int, title: str) -> None:
    """Time each graph of ``found`` (name -> CUDA graph, "engine graph" first) and print ms per replay: the median
    of ``rounds`` rounds of ``replays`` (min-max), and the difference from the engine's graph."""
    from gpu_only import graph_ms

    times = {name: [] for name in found}
    for _ in range(rounds):  # rounds interleave the variants: drift hits them alike
        for name, graph in found.items():
            graph.replay()
            times[name].append(graph_ms(graph, replays))
    base = statistics.median(times["engine graph"])
    print(f"{title}: decode graph replayed alone, ms per replay (median of {rounds} rounds of {replays}; min-max)")
    for name, t in times.items():
        med = statistics.median(t)
        print(f"  {name:42s} {med:7.3f}  ({min(t):.3f}-{max(t):.3f})  {med - base:+7.3f}")


if __name__ == "__main__":
    main()
