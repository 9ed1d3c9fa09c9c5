"""What a stage boundary costs: a chain of tiny kernels under programmatic dependent launch (what the engine's
decode step does today, ``engine/layers/pdl.py``) against grid-wide barriers inside one persistent kernel (what a
persistent or "megakernel" decode step would do instead), both replayed in a CUDA graph.

    PYTHONPATH=. python3 scripts/grid_barrier.py [--stages 256] [--programs 132,264]

Per stage, every program loads one float written in the stage before and stores one: the dependency is real,
the work nil, so the time is the boundary alone. The barrier is a global counter: each program adds 1
(release) and spins on it (acquire) until all ``programs`` of the round have arrived; every program must be
resident at once, so ``programs`` stays at or under one per SM times the occupancy. Prints microseconds per
stage, the median of 5 timings of 10 replays.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from gpu_only import graph_ms, require_cuda

if __name__ == "__main__":
    require_cuda()
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _stage(x_ptr, y_ptr, PDL: tl.constexpr):
    pid = tl.program_id(0)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    tl.store(y_ptr + pid, tl.load(x_ptr + pid) + 1.0)


@triton.jit
def _persistent(buf_ptr, counter_ptr, programs, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    for s in range(STAGES):
        src, dst = buf_ptr + (s % 2) * programs, buf_ptr + ((s + 1) % 2) * programs
        tl.store(dst + pid, tl.load(src + (pid + 1) % programs, volatile=True) + 1.0)
        tl.atomic_add(counter_ptr, 1, sem="release")
        seen = tl.atomic_add(counter_ptr, 0, sem="acquire")
        while seen < (s + 1) * programs:
            seen = tl.atomic_add(counter_ptr, 0, sem="acquire")


def per_stage_us(launch, stages: int) -> float:
    """Microseconds per stage of ``launch()`` (all stages) captured in a CUDA graph: median of 5 timings."""
    launch()  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    return statistics.median(graph_ms(graph, 10) for _ in range(5)) * 1e3 / stages


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stages", type=int, default=256)
    ap.add_argument("--programs", default="132,264")
    args = ap.parse_args()
    n = args.stages
    print(f"{torch.cuda.get_device_name()}, {torch.cuda.get_device_properties(0).multi_processor_count} SMs, "
          f"{n} stages; us per stage")
    for g in (int(p) for p in args.programs.split(",")):
        bufs = [torch.zeros(g, device="cuda") for _ in range(2)]
        for pdl in (False, True):
            def chain(pdl=pdl, g=g, bufs=bufs):
                for s in range(n):
                    _stage[(g,)](bufs[s % 2], bufs[(s + 1) % 2], PDL=pdl, launch_pdl=pdl, num_warps=4)
            print(f"  {g:4d} programs, a kernel per stage{' with PDL' if pdl else ''}: {per_stage_us(chain, n):.2f}")
        buf, counter = torch.zeros(2 * g, device="cuda"), torch.zeros(1, dtype=torch.int32, device="cuda")

        def persistent(g=g, buf=buf, counter=counter):
            counter.zero_()
            _persistent[(g,)](buf, counter, g, STAGES=n, num_warps=4)
        print(f"  {g:4d} programs, one persistent kernel, a grid barrier per stage: {per_stage_us(persistent, n):.2f}")


if __name__ == "__main__":
    main()
