"""Would a persistent kernel that streams the weights through shared memory beat the kernel-per-stage chain at batch
1? ``stream_layers.cu`` (read it first) computes Qwen3-0.6B's 28 layers of GEMVs as ``persistent_layers.py`` does,
one block per SM, each weight tile copied into a ring of NS 16 KB shared-memory slots by Hopper's bulk copy, up to
NS tiles ahead of the arithmetic and across the grid barriers between stages. Call 90's persistent Triton kernel
held the next stage's weights in registers (200-255 a thread) and lost to the chain by 4.6 us a layer; here the
registers stay free and the copies stay in flight while a block waits at a barrier.

Prints, for the engine's chain (``norm_gemv``/``gemv`` under PDL) and each ring depth: ms per CUDA-graph replay
(median of 5 timings), us per layer, the share of 4.3 TB/s and the largest error against a float32 torch
reference. The variant without barriers computes wrong values: it is the bound with the barriers taken out.
Builds the kernel with NVRTC through CuPy (on the device image).

    python scripts/stream_layers.py [--layers 28] [--replays 50]
"""

from pathlib import Path

import torch
from gpu_only import require_cuda

if __name__ == "__main__":
    require_cuda()
from persistent_layers import INTER, QKV, chain, setup  # noqa: E402

SLOT, MAX_WARPS = 16384, 16
KERNELS = {"stream_ns4": (4, 8), "stream_ns8": (8, 8), "stream_ns13": (13, 8), "stream_ns13_w16": (13, 16),
           "stream_ns13_nobarrier": (13, 8)}  # name: ring slots, warps a block


def build():
    """The module's kernels by name, or exit 2 with one line where CuPy is missing."""
    try:
        import cupy
    except ImportError:
        raise SystemExit("error: stream_layers.py builds its kernel with CuPy, which this Python lacks") from None
    src = (Path(__file__).parent / "stream_layers.cu").read_text()
    module = cupy.RawModule(code=src, options=("-std=c++17",))  # CuPy adds -arch for the GPU it runs on
    return cupy, {name: module.get_function(name) for name in KERNELS}


def smem_bytes(ns: int) -> int:
    """The kernel's dynamic shared memory: the ring, xs [INTER], part [2, MAX_WARPS], red [MAX_WARPS], NS mbarriers."""
    return ns * SLOT + (INTER + 3 * MAX_WARPS) * 4 + ns * 8


def streamer(cupy, kernel, ns: int, warps: int, w: dict, h: torch.Tensor):
    """A launcher of ``kernel`` over ``w``'s layers updating h ``[H]`` float32 in place, and its flag (set when a
    grid barrier of the last launch gave up), on torch's current stream so that a CUDA graph captures it."""
    dev, layers = h.device, w["qkv"].shape[0]
    blocks = torch.cuda.get_device_properties(dev).multi_processor_count
    assert blocks <= 256, "every stage needs a tile for each block"
    qkv, act = torch.empty(QKV, device=dev), torch.empty(INTER, device=dev)
    ctr, flag = torch.zeros(4 * layers, dtype=torch.int32, device=dev), torch.zeros(1, dtype=torch.int32, device=dev)
    # ask for all of an SM's shared memory, used or not: one block per SM at every ring depth
    shared = max(smem_bytes(ns), torch.cuda.get_device_properties(dev).shared_memory_per_block_optin)
    kernel.max_dynamic_shared_size_bytes = shared
    bits = [cupy.asarray(w[k].view(torch.int16)) for k in ("qkv", "o", "gu", "d", "n1", "n2")]
    args = (*bits, *(cupy.asarray(t) for t in (h, qkv, act, ctr, flag)), cupy.int32(layers), cupy.float32(1e-6))

    def launch():
        ctr.zero_()
        flag.zero_()
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            kernel((blocks,), (32 * warps,), args, shared_mem=shared)
    return launch, flag


def main():
    cupy, kernels = build()
    w, h0, report = setup()
    launch, out = chain(w, h0.clone())
    report("engine chain (norm_gemv, gemv; PDL)", launch, out)
    for name, (ns, warps) in KERNELS.items():
        k = kernels[name]
        h = h0.clone()
        go, flag = streamer(cupy, k, ns, warps, w, h)

        def launch(go=go, h=h):
            h.copy_(h0)
            go()
        print(f"  ({name}: {k.num_regs} registers/thread, {k.local_size_bytes} B local, {smem_bytes(ns)} B shared)")
        report(f"{name} ({ns} x 16 KB, {warps} warps)", launch, h, flag)


if __name__ == "__main__":
    main()
