"""The first thing every CUDA-only script under scripts/ does: where it cannot run, one line on stderr and
exit 2 (bad input), before it imports Triton or touches a GPU. And their one way to time a CUDA graph."""

from __future__ import annotations

import os
import sys


def require_cuda(gpus: int = 1, torchrun: bool = False) -> None:
    """Exit 2 with one line unless this machine has ``gpus`` CUDA GPUs (and, with ``torchrun``, this process
    was started by torchrun); asked for ``--help`` there, print the script's docstring and exit 0."""
    import torch

    name = os.path.basename(sys.argv[0])
    problem = None
    if not torch.cuda.is_available():
        problem = f"{name} measures CUDA kernels and this machine has no CUDA GPU (run it on the device machine)"
    elif torch.cuda.device_count() < gpus:
        problem = f"{name} needs {gpus} CUDA GPUs, this machine has {torch.cuda.device_count()}"
    elif torchrun and "RANK" not in os.environ:
        problem = f"{name} runs one process per GPU: start it with torchrun --nproc-per-node={gpus} {sys.argv[0]}"
    if problem:
        if {"-h", "--help"} & set(sys.argv[1:]):  # refused before argparse runs: its docstring instead
            print((getattr(sys.modules["__main__"], "__doc__", None) or "").strip() + f"\n\n(this machine: {problem})")
            sys.exit(0)
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)


def graph_ms(graph, replays: int) -> float:
    """Milliseconds per replay of a captured CUDA ``graph``, ``replays`` back to back between two events
    (the device synchronised first, so earlier work is not counted)."""
    import torch

    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / replays


if __name__ == "__main__":
    print("error: gpu_only.py is what the CUDA scripts import, not a tool (run one of them)", file=sys.stderr)
    sys.exit(2)
