"""Where should a batch-1 layer's two RMSNorms run? Qwen3's chain of GEMVs at 0.6B or 8B shapes (attention passed
through, as in persistent_layers.py), two ways replayed in a CUDA graph under PDL on the same weights:

- ``engine``: the kernels before session 42. Rows of <= ``gemm.NORM_GEMV_MAX_K``: the norm (with its weight)
  inside the GEMV after it; longer rows (the 8B): the one-program Triton norm kernel, then the GEMV.
- ``sum_sq``: the GEMV before each norm adds the residual and sums the new row's squares (one float atomic a
  program); the GEMV after it scales by 1 / rms, the norm's weight folded into its own (the engine's way since
  session 42). Call 105 also timed the norm fused after the fold, without its weight row: it lost.

Prints ms per replay, us per layer, the share of 4.3 TB/s, and the largest error against a float32 torch reference.

    python scripts/norm_chain.py [--shape 8b] [--layers 36] [--replays 50]
"""

import statistics

import torch
from gpu_only import graph_ms, require_cuda

from common import OneLineParser

SHAPES = {"0.6b": (1024, 4096, 2048, 3072, 28), "8b": (4096, 6144, 4096, 12288, 36)}  # hidden, qkv, q, inter, layers
EPS = 1e-6


def weights(shape: str, layers: int) -> dict:
    torch.manual_seed(0)
    h, qkv, q, inter, _ = SHAPES[shape]

    def w(rows, k):
        return [(torch.randn(rows, k, device="cuda") * (0.5 / k ** 0.5)).to(torch.bfloat16) for _ in range(layers)]

    def g(k):
        return [(1 + 0.1 * torch.randn(k, device="cuda")).to(torch.bfloat16) for _ in range(layers)]
    return {"qkv": w(qkv, h), "o": w(h, q), "gu": w(2 * inter, h), "d": w(h, inter), "n1": g(h), "n2": g(h), "q": q}


def reference(w: dict, h0: torch.Tensor) -> torch.Tensor:
    def norm(x, n):
        return x * torch.rsqrt(x.pow(2).mean() + EPS) * n.float()
    x = h0.clone()
    for i in range(len(w["qkv"])):
        x = x + w["o"][i].float() @ (w["qkv"][i].float() @ norm(x, w["n1"][i]))[:w["q"]]
        gate, up = (w["gu"][i].float() @ norm(x, w["n2"][i])).chunk(2)
        x = x + w["d"][i].float() @ (torch.nn.functional.silu(gate) * up)
    return x


def engine_chain(w, h0, out):
    from engine.layers import gemm, gemv

    def norm_linear(x, res, n, weight, swiglu=False):
        if x.shape[-1] <= gemm.NORM_GEMV_MAX_K:
            return gemv.norm_gemv(x, res, n, EPS, weight, swiglu)
        x, res = gemv.add_rms_norm(x, res, n, EPS)
        return (gemv.norm_gemv(x, None, None, 0.0, weight, True)[0] if swiglu else gemv.gemv(x, weight)), res

    def launch():
        x, res = h0.to(torch.bfloat16)[None], None
        for i in range(len(w["qkv"])):
            q, res = norm_linear(x, res, w["n1"][i], w["qkv"][i])
            a, res = norm_linear(gemv.gemv(q[:, :w["q"]], w["o"][i]), res, w["n2"][i], w["gu"][i], True)
            x = gemv.gemv(a, w["d"][i])
        out.copy_((x.float() + res.float())[0])
    return launch


def sum_sq_chain(w, h0, out):
    from engine.layers import gemv

    ss = torch.zeros(2 * len(w["qkv"]), device="cuda")

    def launch():
        ss.zero_()
        res = h0.to(torch.bfloat16)[None]
        q = gemv.norm_gemv(res, None, w["n1"][0], EPS, w["qkv"][0])[0]
        for i in range(len(w["qkv"])):
            if i:
                q = gemv.gemv(res, w["qkv_f"][i], norm=(ss[2 * i - 1:2 * i], EPS))
            res = gemv.gemv(q[:, :w["q"]], w["o"][i], add=(res, ss[2 * i:2 * i + 1]))
            a = gemv.norm_gemv(res, None, None, EPS, w["gu_f"][i], True, sum_sq=ss[2 * i:2 * i + 1])[0]
            res = gemv.gemv(a, w["d"][i], add=(res, ss[2 * i + 1:2 * i + 2]))
        out.copy_(res.float()[0])
    return launch


def timed(launch, replays: int) -> float:
    launch()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    return statistics.median(graph_ms(graph, replays) for _ in range(5))


def main():
    ap = OneLineParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), default="8b")
    ap.add_argument("--layers", type=int, default=0, help="0: the model's")
    ap.add_argument("--replays", type=int, default=50)
    args = ap.parse_args()
    if args.layers < 0:
        ap.error(f"--layers: 0 (the model's) or more, got {args.layers}")
    if args.replays < 1:
        ap.error(f"--replays: 1 or more, got {args.replays}")
    require_cuda()
    from engine.layers import pdl

    pdl.set_pdl(True, torch.device("cuda"))
    layers = args.layers or SHAPES[args.shape][4]
    w = weights(args.shape, layers)
    w["qkv_f"] = [(m.float() * n.float()).to(m.dtype) for m, n in zip(w["qkv"], w["n1"])]
    w["gu_f"] = [(m.float() * n.float()).to(m.dtype) for m, n in zip(w["gu"], w["n2"])]
    h0 = torch.randn(SHAPES[args.shape][0], device="cuda")
    ref = reference(w, h0)
    mb = sum(t.numel() * 2 for k in ("qkv", "o", "gu", "d") for t in w[k]) / 1e6
    floor_us = mb / 4.3e6 * 1e6
    print(f"Qwen3-{args.shape} shapes, {layers} layers, {mb:.0f} MB: floor {floor_us:.1f} us at 4.3 TB/s; ms per "
          f"replay, median of 5 timings of {args.replays}", flush=True)
    out = torch.empty_like(h0)
    ways = [("engine", engine_chain(w, h0, out))]
    ways += [("sum_sq in the GEMV before", sum_sq_chain(w, h0, out))]
    for name, launch in ways:
        ms = timed(launch, args.replays)
        launch()
        torch.cuda.synchronize()
        err = ((out - ref).abs().max() / ref.abs().max()).item()
        print(f"  {name:32s} {ms:7.4f} ms  {ms * 1e3 / layers:6.2f} us/layer  {floor_us / (ms * 1e3):5.1%} of "
              f"4.3 TB/s  max error {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
