"""Would a persistent kernel that streams the weights through shared memory beat the kernel-per-stage chain at batch
1? ``stream_layers.cu`` (read it first) computes Qwen3-0.6B's 28 layers of GEMVs as ``persistent_layers.py`` does,
one block per SM, each weight tile copied into a ring of NS 16 KB shared-memory slots by Hopper's bulk copy, up to
NS tiles ahead of the arithmetic and across the grid barriers between stages. Call 90's persistent Triton kernel
held the next stage's weights in registers (200-255 a thread) and lost to the chain by 4.6 us a layer; here the
registers stay free and the copies stay in flight while a block waits at a barrier.

Prints, for the engine's chain (``norm_gemv``/``gemv`` under PDL) and each ring depth: ms per CUDA-graph replay
(median of 5 timings), us per layer, the share of 4.3 TB/s and the largest error against a float32 torch
reference. Two variants compute wrong values: without barriers (the bound with the barriers taken out), and
without weights (the barriers and the activations' reloads alone: the critical path the copies must hide).
Then the full layer (``layer_*``: Qwen3's attention at batch 1 between qkv and o, ``stream_attention.cuh``) at each
of ``--positions`` (the query's position; the cache holds that many earlier ones), against a float32 torch
reference of the whole layer, and the new K/V it stored against the reference's. Builds the kernels with NVRTC
through CuPy (on the device image).

    python scripts/stream_layers.py [--layers 28] [--replays 50] [--positions 32,160,512,1024]
"""

import argparse
from pathlib import Path

import torch
from gpu_only import require_cuda

if __name__ == "__main__":
    require_cuda()
from persistent_layers import INTER, QKV, QO, chain, setup  # noqa: E402

SLOT, MAX_WARPS, D, QH, KVH, THETA = 16384, 16, 128, 16, 8, 1e6  # Qwen3-0.6B's heads and RoPE theta
KERNELS = {"stream_ns4": (4, 8), "stream_ns8": (8, 8), "stream_ns13": (13, 8), "stream_ns13_w16": (13, 16),
           "stream_ns13_nobarrier": (13, 8), "stream_barriers_only": (0, 8)}  # name: ring slots, warps a block
LAYER_KERNELS = {"layer_ns13": (13, 8), "layer_ns13_w16": (13, 16)}


def build():
    """CuPy and the module's kernels by name, or exit 2 with one line where CuPy is missing."""
    try:
        import cupy
    except ImportError:
        raise SystemExit("error: stream_layers.py builds its kernel with CuPy, which this Python lacks") from None
    here = Path(__file__).parent
    include = '#include "stream_attention.cuh"'  # inlined: CuPy's cache of built modules keys on the code alone
    code = (here / "stream_layers.cu").read_text().replace(include, (here / "stream_attention.cuh").read_text())
    module = cupy.RawModule(code=code, options=("-std=c++17",))  # CuPy adds -arch for the GPU it runs on
    return cupy, {name: module.get_function(name) for name in {**KERNELS, **LAYER_KERNELS}}


def smem_bytes(ns: int) -> int:
    """The kernel's dynamic shared memory: the ring, xs [INTER], part [2, MAX_WARPS], red [MAX_WARPS], NS mbarriers."""
    return ns * SLOT + (INTER + 3 * MAX_WARPS) * 4 + ns * 8


def attention_inputs(layers: int, pos: int, dev) -> dict:
    """Random q/k norm weights ``[L, D]``, a bf16 cache ``[L, KVH, pos + 1, D]`` (k and v) with positions < pos
    filled, cos/sin at ``pos`` ``[2 D]`` (transformers' Qwen3 RoPE), the attention's output ``[QH D]``."""
    inv_freq = 1.0 / THETA ** (torch.arange(0, D, 2, device=dev).float() / D)
    emb = torch.cat((pos * inv_freq, pos * inv_freq))
    cache = [torch.randn(layers, KVH, pos + 1, D, device=dev).to(torch.bfloat16) for _ in range(2)]
    for c in cache:
        c[:, :, pos] = 0
    return {"qn": (1 + 0.1 * torch.randn(layers, D, device=dev)).to(torch.bfloat16),
            "kn": (1 + 0.1 * torch.randn(layers, D, device=dev)).to(torch.bfloat16),
            "kc": cache[0], "vc": cache[1], "cos_sin": torch.cat((emb.cos(), emb.sin())),
            "out": torch.empty(QH * D, device=dev), "pos": pos}


def reference_layers(w: dict, a: dict, h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Qwen3's layers at batch 1 in float32 torch: h ``[H]``, and the k, v stored at pos ``[L, KVH, D]``."""
    def norm(x, n):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * n.float()
    cos, sin = a["cos_sin"].view(2, D)

    def rope(x):
        return x * cos + torch.cat((-x[..., D // 2:], x[..., :D // 2]), -1) * sin
    x, pos, ks, vs = h0.clone(), a["pos"], [], []
    for i in range(w["qkv"].shape[0]):
        q, k, v = (w["qkv"][i].float() @ norm(x, w["n1"][i])).split([QO, KVH * D, KVH * D])
        q, k, v = rope(norm(q.view(QH, D), a["qn"][i])), rope(norm(k.view(KVH, D), a["kn"][i])), v.view(KVH, D)
        keys = torch.cat((a["kc"][i, :, :pos].float(), k[:, None]), 1).repeat_interleave(QH // KVH, 0)
        values = torch.cat((a["vc"][i, :, :pos].float(), v[:, None]), 1).repeat_interleave(QH // KVH, 0)
        p = torch.softmax((keys @ q[:, :, None]).squeeze(-1) / D ** 0.5, -1)  # [QH, pos + 1]
        x = x + w["o"][i].float() @ (p[:, :, None] * values).sum(1).flatten()
        g, u = (w["gu"][i].float() @ norm(x, w["n2"][i])).split(INTER)
        x = x + w["d"][i].float() @ (torch.nn.functional.silu(g) * u)
        ks.append(k)
        vs.append(v)
    return x, torch.stack(ks), torch.stack(vs)


def streamer(cupy, kernel, ns: int, warps: int, w: dict, h: torch.Tensor, a: dict | None = None):
    """A launcher of ``kernel`` over ``w``'s layers updating h ``[H]`` float32 in place (``a``: the full layer's
    attention inputs), and its flag (set when a grid barrier of the last launch gave up), on torch's current
    stream so that a CUDA graph captures it."""
    dev, layers = h.device, w["qkv"].shape[0]
    blocks = torch.cuda.get_device_properties(dev).multi_processor_count
    assert QH <= blocks <= 256, "every stage needs a tile for each block, and attention a block for each head"
    qkv, act = torch.empty(QKV, device=dev), torch.empty(INTER, device=dev)
    ctr, flag = torch.zeros(5 * layers, dtype=torch.int32, device=dev), torch.zeros(1, dtype=torch.int32, device=dev)
    # ask for all of an SM's shared memory, used or not: one block per SM at every ring depth
    shared = max(smem_bytes(ns), torch.cuda.get_device_properties(dev).shared_memory_per_block_optin)
    kernel.max_dynamic_shared_size_bytes = shared
    a = a or {"qn": w["n1"], "kn": w["n1"], "kc": w["n1"], "vc": w["n1"], "cos_sin": h, "out": h, "pos": 0}
    bits = [cupy.asarray(t.view(torch.int16)) for t in (w["qkv"], w["o"], w["gu"], w["d"], w["n1"], w["n2"])]
    attn = [cupy.asarray(a[k].view(torch.int16)) for k in ("qn", "kn", "kc", "vc")]
    args = (*bits, *(cupy.asarray(t) for t in (h, qkv, act, ctr, flag)), cupy.int32(layers), cupy.float32(1e-6),
            *attn, cupy.asarray(a["cos_sin"]), cupy.asarray(a["out"]), cupy.int32(a["pos"]),
            cupy.int32(a["kc"].shape[2] if a["kc"].dim() == 4 else 0))

    def launch():
        ctr.zero_()
        flag.zero_()
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            kernel((blocks,), (32 * warps,), args, shared_mem=shared)
    return launch, flag


def main():
    cupy, kernels = build()
    ap = argparse.ArgumentParser()
    ap.add_argument("--positions", default="32,160,512,1024", help="the full layer's query positions")
    w, h0, report, args = setup(ap=ap)
    launch, out = chain(w, h0.clone())
    report("engine chain (norm_gemv, gemv; PDL)", launch, out)
    for name, (ns, warps) in KERNELS.items():
        run(cupy, kernels[name], name, ns, warps, w, h0, report)
    for pos in map(int, args.positions.split(",")):
        a = attention_inputs(w["qkv"].shape[0], pos, h0.device)
        want, k_ref, v_ref = reference_layers(w, a, h0)
        print(f"the full layer at position {pos} (its KV cache: {2 * a['kc'].numel() * 2 / 1e6:.0f} MB)")
        for name, (ns, warps) in LAYER_KERNELS.items():
            a["kc"][:, :, pos], a["vc"][:, :, pos] = 0, 0  # each kernel's own stores are checked
            run(cupy, kernels[name], name, ns, warps, w, h0, report, a, want)
            stored = [(c[:, :, pos].float() - r).abs().max().item() / r.abs().max().item()
                      for c, r in ((a["kc"], k_ref), (a["vc"], v_ref))]
            print(f"    new k, v in the cache: max error {stored[0]:.1e}, {stored[1]:.1e} (bf16)")


def run(cupy, kernel, name, ns, warps, w, h0, report, a=None, want=None):
    """Time one kernel and print its line (``a``, ``want``: the full layer's inputs and reference h)."""
    h = h0.clone()
    go, flag = streamer(cupy, kernel, ns, warps, w, h, a)

    def launch():
        h.copy_(h0)
        go()
    print(f"  ({name}: {kernel.num_regs} registers/thread, {kernel.local_size_bytes} B local, {smem_bytes(ns)} B "
          "shared)")
    report(f"{name} ({ns} x 16 KB, {warps} warps)", launch, h, flag, want)


if __name__ == "__main__":
    main()
