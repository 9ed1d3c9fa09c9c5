"""All-reduce on several GPUs: NCCL against PyTorch's symmetric-memory one-shot and two-shot kernels, and
NCCL's own symmetric kernels ("NCCL symk": ``dist.all_reduce`` on a buffer from the process group's NCCL
memory pool, window-registered with ``register_mem_pool(pool, symm=True)``; NCCL >= 2.27, one NVLink domain;
PyTorch's symmetric-memory documentation, "NCCL Symmetric Kernels").

    torchrun --nproc-per-node=2 scripts/all_reduce_sizes.py            # check, then time every size
    torchrun --nproc-per-node=2 scripts/all_reduce_sizes.py --check    # correctness only (tests/test_gpu.py)

Check: for every message shape the model uses (``[B, hidden]`` decode batches, prefill chunks) the engine's
``SymmMemAllReduce`` (both algorithms, forced, and its row-parallel matmul path) must equal NCCL exactly in
float32 (two ranks: a + b is a + b in any order). Timing: 40 calls of each algorithm captured in one CUDA
graph, 20 replays after 3 warm-ups, CUDA events; microseconds per call, bf16, 2 KiB to 64 MiB. Rank 0
prints the table (and writes it to ``--out``), and the kernel NCCL ran for the symk column at 8 KiB and
2 MiB (``ncclSymkDevKernel_*`` when the symmetric kernels were chosen).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from engine.layers.all_reduce import SYMM_MAX_BYTES, SymmMemAllReduce  # noqa: E402

CALLS, REPLAYS = 40, 20


def check(rank: int, world: int, device: torch.device) -> list[str]:
    """Exact float32 equality with NCCL; returns the failures (empty when all pass)."""
    impl = SymmMemAllReduce(world, SYMM_MAX_BYTES // 4, torch.float32, device)
    failures = []
    for hidden in (1024, 4096):
        for rows in (1, 2, 8, 64, 256, 512, 2048, 16384):
            torch.manual_seed(1000 * rank + rows)
            x = torch.randn(rows, hidden, device=device)
            ref = x.clone()
            dist.all_reduce(ref)
            for name, limit in (("one-shot", 1 << 62), ("two-shot", 0)):
                impl.one_shot_max = limit  # force the algorithm (messages above the buffer go to NCCL)
                if not torch.equal(impl(x.clone()), ref):
                    failures.append(f"{name} [{rows}, {hidden}]")
            a = torch.randn(rows, 64, device=device)
            w = torch.randn(hidden, 64, device=device)
            want = F.linear(a, w)
            dist.all_reduce(want)
            if not torch.equal(impl.matmul(a, w), want):
                failures.append(f"matmul [{rows}, {hidden}]")
    return failures


def time_graph(fn, device) -> float:
    """Microseconds per call of ``fn`` (CALLS captured in one graph)."""
    stream = torch.cuda.Stream(device)
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            fn()
    for _ in range(3):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dist.barrier()
    start.record()
    for _ in range(REPLAYS):
        graph.replay()
    end.record()
    torch.cuda.synchronize(device)
    return start.elapsed_time(end) * 1e3 / (REPLAYS * CALLS)


def nccl_window_buffer(numel: int, device: torch.device) -> torch.Tensor | None:
    """A bf16 buffer of ``numel`` elements from the NCCL memory pool, registered as a symmetric window (None,
    with the reason printed, where this PyTorch / NCCL cannot)."""
    try:
        backend = dist.group.WORLD._get_backend(device)
        pool = torch.cuda.MemPool(backend.mem_allocator)
        with torch.cuda.use_mem_pool(pool):
            buf = torch.zeros(numel, dtype=torch.bfloat16, device=device)
        backend.register_mem_pool(pool, symm=True)
        # Deregistered before the process group goes (left registered, the exit aborted: SIGABRT, call 17).
        nccl_window_buffer.release = lambda: backend.deregister_mem_pool(pool)
        return buf
    except Exception as e:  # noqa: BLE001 - report and leave the column out
        print(f"NCCL symk: not available ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
        return None


def kernel_names(fn) -> str:
    """The CUDA kernels one call of ``fn`` runs (names, comma-separated)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}
    return ", ".join(sorted(n[:60] for n in names))


def timings(world: int, device: torch.device) -> list[tuple[int, float, float, float, float]]:
    impl = SymmMemAllReduce(world, (64 << 20) // 2, torch.bfloat16, device)
    ops, name = torch.ops.symm_mem, impl.group_name
    window = nccl_window_buffer((64 << 20) // 2, device)
    rows = []
    for nbytes in [2 << 10, 8 << 10, 32 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20,
                   8 << 20, 16 << 20, 32 << 20, 64 << 20]:
        n = nbytes // 2
        x = torch.randn(n, device=device, dtype=torch.bfloat16)
        view, out = impl.buf[:n], torch.empty_like(x)
        view.copy_(x)
        nccl = time_graph(lambda: dist.all_reduce(x), device)
        one = time_graph(lambda: ops.one_shot_all_reduce_out(view, "sum", name, out), device)
        two = time_graph(lambda: ops.two_shot_all_reduce_out(view, "sum", name, out), device)
        symk = float("nan")
        if window is not None:
            w = window[:n]
            w.copy_(x)
            want = x.clone()
            dist.all_reduce(want)
            dist.all_reduce(w)  # a + b for two ranks: exact in bf16 whatever the algorithm
            if world == 2 and not torch.equal(w, want):
                print(f"NCCL symk: differs from NCCL at {nbytes} bytes")
            if nbytes in (8 << 10, 2 << 20) and dist.get_rank() == 0:
                print(f"NCCL symk kernels at {nbytes} bytes: {kernel_names(lambda: dist.all_reduce(w))}")
            elif nbytes in (8 << 10, 2 << 20):
                dist.all_reduce(w)  # the other ranks join the profiled call
            symk = time_graph(lambda: dist.all_reduce(w), device)
        rows.append((nbytes, nccl, one, two, symk))
    return rows


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--check", action="store_true", help="correctness only")
    p.add_argument("--out", help="write the timing table here (rank 0)")
    args = p.parse_args()
    from gpu_only import require_cuda

    require_cuda(2, torchrun=True)
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    failures = check(rank, world, device)
    if rank == 0:
        print("check:", "every size equals NCCL exactly (float32)" if not failures else f"FAILED {failures}")
    if not args.check and not failures:
        rows = timings(world, device)
        if rank == 0:
            lines = [f"tp={world}, bf16, us per call (40 calls per CUDA graph), NCCL_PROTO="
                     f"{os.environ.get('NCCL_PROTO', 'default')}",
                     "| bytes | NCCL | one-shot | two-shot | NCCL symk | best |",
                     "|---|---|---|---|---|---|"]
            for nbytes, nccl, one, two, symk in rows:
                best = min(("NCCL", nccl), ("one-shot", one), ("two-shot", two), ("NCCL symk", symk),
                           key=lambda kv: kv[1] if kv[1] == kv[1] else float("inf"))[0]
                lines.append(f"| {nbytes} | {nccl:.1f} | {one:.1f} | {two:.1f} | {symk:.1f} | {best} |")
            print("\n".join(lines))
            if args.out:
                with open(args.out, "w") as f:
                    f.write("\n".join(lines) + "\n")
    release = getattr(nccl_window_buffer, "release", None)
    if release is not None:
        torch.cuda.synchronize()
        release()
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
