"""Weights into L2 from a second stream, off the decode step's PDL chain: the batch-1 decode graph re-captured with a
``prefetch.global.L2`` kernel on a side branch after each GEMV, for the weight of the GEMV ``lead`` places later.
Call 70 put such hints in the chain and lost (the chain waited for them); call 71 found a GEMV whose weight is in L2
1.5-3 us faster. Here nothing in the chain waits for a hint: the side kernel depends on GEMV k's end and the chain
never on it (the graph joins the branch at its end only). Hints write nothing, so the tokens are the engine's.

    python scripts/l2_side_prefetch.py [--model qwen3-0.6b] [--skip 64] [--replays 200]

Prints ms per replay of each variant (median of ``--rounds``, min-max) and the difference from the engine's graph.
"""

import argparse

import torch
from gpu_only import require_cuda

if __name__ == "__main__":
    require_cuda()
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _hint_kernel(w_ptr, n_lines, LINES: tl.constexpr):
    offs = tl.program_id(0) * LINES + tl.arange(0, LINES)
    for start in range(0, n_lines, tl.num_programs(0) * LINES):
        line = tl.minimum(start + offs, n_lines - 1).to(tl.int64)
        tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [w_ptr + line * 128],
                                  dtype=tl.int32, is_pure=False, pack=1)


class SidePrefetch:
    """Wraps the GEMV entry points of ``engine.layers.gemm``: a recording pass lists the weights in call order, then
    each later call k launches the hints for weight k + ``lead`` (its first ``cap`` bytes) on ``self.side`` after
    GEMV k (an event on the current stream)."""

    def __init__(self, lead: int, cap: int, programs: int):
        self.lead, self.cap, self.programs = lead, cap, programs
        self.order: list[torch.Tensor] | None = None
        self.calls = 0
        self.side = torch.cuda.Stream()

    def wrap(self, fn, weight_at: int):
        def call(*a, **kw):
            y = fn(*a, **kw)
            w = a[weight_at]
            if self.order is None:
                self._seen.append(w)
                return y
            k = self.calls % len(self.order)
            self.calls += 1
            nxt = k + self.lead
            if nxt < len(self.order):
                ev = torch.cuda.Event()
                ev.record()
                self.side.wait_event(ev)
                with torch.cuda.stream(self.side):
                    self.hint(self.order[nxt])
            return y
        return call

    def hint(self, w: torch.Tensor) -> None:
        lines = min(w.numel() * w.element_size(), self.cap) // 128
        if lines:
            _hint_kernel[(self.programs,)](w.view(torch.uint8), lines, LINES=128, num_warps=4)
        else:  # the control: the branch's fork and join with nothing to do
            _hint_kernel[(1,)](w.view(torch.uint8), 1, LINES=128, num_warps=1)

    def record(self, step) -> None:
        self._seen: list[torch.Tensor] = []
        self.order = None
        step()
        self.order, self.calls = self._seen, 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-0.6b")
    ap.add_argument("--skip", type=int, default=64, help="decode steps before measuring (the context grows)")
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from profile_steps import open_engine
    from step_ablation import compare, patched

    from engine.layers import gemm
    from engine.staged_inputs import views

    args.workload, args.tp, args.sync, args.all_reduce, args.num_seqs = "latency", 1, False, "auto", 1
    mb = 1 << 20
    variants = {"control: a no-op side kernel, lead 2": (2, 0, 132)}
    variants |= {f"lead {lead}, {cap // mb} MB cap, {p} programs": (lead, cap, p)
                 for lead, cap, p in [(1, 16 * mb, 132), (2, 16 * mb, 132), (3, 16 * mb, 132), (2, 16 * mb, 32),
                                      (2, 16 * mb, 264), (2, 4 * mb, 132), (4, 16 * mb, 132)]}
    with open_engine(args) as llm:
        for _ in range(args.skip):
            llm.step()
        llm.finish_step()
        graphs = llm.runner.graphs
        context = max(len(s) for s in llm.scheduler.running)
        bs, split = graphs.key_for(1, context)
        found = {"engine graph": graphs.graph_for(1, context)}
        st = views(graphs.inputs.device, graphs.inputs.layouts[bs][0])
        inputs = graphs._inputs(st, split)
        for name, (lead, cap, programs) in variants.items():
            side = SidePrefetch(lead, cap, programs)
            with patched((gemm, "_gemv", side.wrap(gemm._gemv, 1)),
                         (gemm, "_norm_gemv", side.wrap(gemm._norm_gemv, 4))):
                side.record(lambda: graphs._step(inputs, st))  # also compiles the hint kernel outside capture
                graphs._step(inputs, st)
                torch.cuda.synchronize()
                side.calls = 0
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    side.side.wait_stream(torch.cuda.current_stream())
                    graphs._step(inputs, st)
                    torch.cuda.current_stream().wait_stream(side.side)
                torch.cuda.synchronize()
            found[name] = graph
            print(f"{name}: {len(side.order)} GEMVs per step", flush=True)
        compare(found, args.rounds, args.replays, f"{args.model} batch 1, context {context} tokens, {split} KV splits")


if __name__ == "__main__":
    main()
