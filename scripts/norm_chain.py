"""Where should a batch-1 layer's two RMSNorms run? Qwen3's chain of GEMVs at 0.6B or 8B shapes (attention passed
through, as in persistent_layers.py), two ways replayed in a CUDA graph under PDL on the same weights:

- ``engine``: the kernels before session 42. Rows of <= ``gemm.NORM_GEMV_MAX_K``: the norm (with its weight)
  inside the GEMV after it; longer rows (the 8B): the one-program Triton norm kernel, then the GEMV.
- ``sum_sq``: the GEMV before each norm adds the residual and sums the new row's squares (one float atomic a
  program); the GEMV after it scales by 1 / rms, the norm's weight folded into its own (the engine's way since
  session 42). Call 105 also timed the norm fused after the fold, without its weight row: it lost.

Prints ms per replay, us per layer, the share of 4.3 TB/s, and the largest error against a float32 torch reference.

With ``--context N`` the chain runs decode attention between QKV and o_proj (one paged cache of N tokens, the
engine's split count), two ways: ``qk_norm`` (the engine's: the decode kernel normalises and rotates q and k) and
``qkv_rope`` (``engine/layers/qkv_rope.py``: QKV's epilogue rotates them and sums each head's squares, the decode
kernel scales by 1 / rms); the error is then against the ``qk_norm`` way's output.

    python scripts/norm_chain.py [--shape 8b] [--layers 36] [--replays 50] [--context 96]
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


def sum_sq_chain(w, h0, out, heads: int = 0, qkv=None, attend=None):
    """The engine's way since session 42 (the module's ``sum_sq``); ``qkv(res, i, ss)`` makes layer i's qkv from
    layer 1 on (default the GEMV scaling by 1 / rms), ``attend(qkv, i, ss)`` its attention (default q passed
    through); ss ``[layers, 2 + heads]`` float32: the norms' squares, then ``heads`` more slots a layer."""
    from engine.layers import gemv

    ss = torch.zeros(len(w["qkv"]), 2 + heads, device="cuda")
    qkv = qkv or (lambda res, i, ss: gemv.gemv(res, w["qkv_f"][i], norm=(ss[i - 1, 1:2], EPS)))
    attend = attend or (lambda q, i, ss: q[:, :w["q"]])

    def launch():
        ss.zero_()
        res = h0.to(torch.bfloat16)[None]
        q = gemv.norm_gemv(res, None, w["n1"][0], EPS, w["qkv"][0])[0]
        for i in range(len(w["qkv"])):
            if i:
                q = qkv(res, i, ss)
            res = gemv.gemv(attend(q, i, ss), w["o"][i], add=(res, ss[i, 0:1]))
            a = gemv.norm_gemv(res, None, None, EPS, w["gu_f"][i], True, sum_sq=ss[i, 0:1])[0]
            res = gemv.gemv(a, w["d"][i], add=(res, ss[i, 1:2]))
        out.copy_(res.float()[0])
    return launch


def attention_chains(w, h0, out, context: int) -> list:
    """The ``sum_sq`` chain with decode attention between QKV and o_proj, the q/k norm and RoPE in the decode kernel
    (``qk_norm``) or in QKV's epilogue (``qkv_rope``); one cache of ``context`` tokens for every layer."""
    from engine.layers import decode_splits
    from engine.layers.paged_decode import paged_decode_attention
    from engine.layers.qkv_rope import qkv_rope

    D, hq, hkv = 128, w["q"] // 128, (w["qkv"][0].shape[0] - w["q"]) // 256
    kc = torch.randn(2, 256, hkv, D, device="cuda", dtype=torch.bfloat16)
    vc, tables = torch.randn_like(kc), torch.zeros(1, 1, dtype=torch.int32, device="cuda")
    ctx = torch.tensor([context], dtype=torch.int32, device="cuda")
    slot = torch.tensor([context - 1], device="cuda")
    splits = decode_splits.num_splits(1, hkv, context, 256, torch.device("cuda"))
    qw, kw = 1 + 0.1 * torch.randn(2, D, device="cuda", dtype=torch.bfloat16)
    angle = torch.rand(D // 2, device="cuda") * 3  # RoPE's "rotate half": each half of cos/sin the same
    cos, sin = angle.cos().repeat(2), angle.sin().repeat(2)

    def rope_qkv(res, i, ss):
        return qkv_rope(res, w["qkv_f"][i], ss[i - 1, 1:2], EPS, ss[i, 2:], qw, kw, cos, sin, hq, hkv)

    def attend(rope: bool):
        def attention(qkv, i, ss):
            q, k, v = qkv.view(1, -1, D).split([hq, hkv, hkv], dim=1)
            norm = {"qk_scale": (ss[i, 2:], EPS)} if rope and i else {"qk_norm": (qw, kw, EPS, cos[None], sin[None])}
            return paged_decode_attention(q, k, v, kc, vc, slot, tables, ctx, D ** -0.5, num_splits=splits,
                                          **norm).view(1, -1)
        return attention
    return [(f"qk_norm, {context} tokens, {splits} splits", sum_sq_chain(w, h0, out, hq + hkv, attend=attend(False))),
            ("qkv_rope", sum_sq_chain(w, h0, out, hq + hkv, rope_qkv, attend(True)))]


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
    ap.add_argument("--context", type=int, default=0, help="tokens of decode attention between QKV and o_proj "
                    "(0: none, attention passed through)")
    args = ap.parse_args()
    if not 0 <= args.context <= 256:
        ap.error(f"--context: 0 to 256 tokens (one KV block), got {args.context}")
    if args.layers < 0 or args.replays < 1:
        ap.error(f"--layers must be >= 0 and --replays >= 1, got {args.layers} and {args.replays}")
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
    if args.context:
        ways = attention_chains(w, h0, out, args.context)
        ways[0][1]()
        ref = out.clone()
    else:
        ways = [("engine", engine_chain(w, h0, out)), ("sum_sq in the GEMV before", sum_sq_chain(w, h0, out))]
    for name, launch in ways:
        ms = timed(launch, args.replays)
        launch()
        torch.cuda.synchronize()
        err = ((out - ref).abs().max() / ref.abs().max()).item()
        print(f"  {name:32s} {ms:7.4f} ms  {ms * 1e3 / layers:6.2f} us/layer  {floor_us / (ms * 1e3):5.1%} of "
              f"4.3 TB/s  max error {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
