"""The decode GEMMs at batch 1: cuBLAS (``F.linear``) against the Triton GEMV (``engine/layers/gemv.py``).

    python scripts/bench_gemv.py [--sweep] [--tiles 1,4096,4 ...] [--chain] [--tp 1,2] [--models qwen3-8b]
                                 [--out table.txt]

For every linear layer of Qwen3-0.6B and Qwen3-8B at tp=1 and tp=2 (the weight shard ``[N, K]`` one rank
holds) at batch 1, on one GPU: microseconds per call beside the floor at 4.3 TB/s (the H200's, on any GPU).
Timing: CALLS (32) calls captured in one CUDA graph, cycling over copies of the weight (up to 256 MB of
copies; every shape reads >= 64 MB per replay, more than the 50 MB L2 holds, as a model's step reads more
than it), 10 replays after warm-up, CUDA events. Each GEMV variant is timed with and without programmatic
dependent launch (``engine/layers/pdl.py``: the next call's weight loads overlap this one's end).
``--sweep`` also times a grid of tiles and warps per shape, with PDL, and prints the best. The GEMV's result
with its default tiles is checked against float64 first, with and without PDL.
(``results/h200x2/skinny_gemm_call8.md``: a first version, batch 8 and a 3-D tile; ``gemv_call9.md``: the sweep
that chose the tiles.)
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gpu_only import graph_ms, require_cuda  # noqa: E402

if __name__ == "__main__":
    require_cuda()
from common import OneLineParser  # noqa: E402
from engine.layers import pdl  # noqa: E402
from engine.layers.gemv import gemv  # noqa: E402
from engine.layers.pdl import set_pdl  # noqa: E402
from harness.report import COPY_BANDWIDTH  # noqa: E402

# bytes/s, the harness's floor on the H200 (a copy's bandwidth, not the 4.8 TB/s spec): one yardstick on every GPU,
# so that the NOTES' percentages compare across H100 and H200 calls
HBM_BYTES_S = COPY_BANDWIDTH["H200"]
CALLS, REPLAYS = 32, 10
# Hugging Face config.json of each (conf/model/*.yaml): hidden, intermediate, heads, kv heads, head_dim, vocab
MODELS = {
    "qwen3-0.6b": (1024, 3072, 16, 8, 128, 151936),
    "qwen3-8b": (4096, 12288, 32, 8, 128, 151936),
}


def shapes(model: str, tp: int) -> dict[str, tuple[int, int]]:
    """Layer -> the (N, K) of one rank's weight shard."""
    hidden, inter, heads, kv, dim, vocab = MODELS[model]
    return {"qkv_proj": ((heads + 2 * kv) * dim // tp, hidden), "o_proj": (hidden, heads * dim // tp),
            "gate_up_proj": (2 * inter // tp, hidden), "down_proj": (hidden, inter // tp),
            "lm_head": (vocab // tp, hidden)}


def time_us(fn_i, copies: int) -> float:
    """Microseconds per call of ``fn_i(i)`` (CALLS calls over ``copies`` weights, in one CUDA graph)."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for i in range(3):
            fn_i(i % copies)
    torch.cuda.synchronize()
    return replay_ms(lambda: [fn_i(i % copies) for i in range(CALLS)]) * 1e3 / CALLS


def replay_ms(fn) -> float:
    """Milliseconds per run of ``fn`` captured in one CUDA graph (one replay to warm up, then REPLAYS)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    return graph_ms(graph, REPLAYS)


SWEEP = list(itertools.product((2, 4, 8), (512, 1024, 2048, 4096), (2, 4, 8)))  # (block_n, block_k, num_warps)


def variants(x, ws, sweep: bool, tiles: list[tuple[int, int, int]]) -> list[tuple[str, float]]:
    """(name, us per call) of cuBLAS and the GEMV with call 9's tiles (4 rows, block_k 512, 4 warps) and with
    today's (``gemv.tiles``), each without and with PDL (``engine/layers/pdl.py``); with ``sweep`` the best
    of SWEEP with PDL; then each of ``tiles`` (block_n, block_k, num_warps) with PDL."""
    copies = len(ws)
    out = [("cuBLAS", time_us(lambda i: F.linear(x, ws[i]), copies))]
    for on, (name, tile) in itertools.product((False, True), (("call-9", (4, 512, 4)), ("default", (None,) * 3))):
        pdl.ENABLED = on
        out.append((f"{name} {'PDL' if on else 'plain'}", time_us(lambda i: gemv(x, ws[i], None, *tile), copies)))
    if sweep:
        t, cfg = min((time_us(lambda i: gemv(x, ws[i], block_n=bn, block_k=bk, num_warps=nw), copies),
                      (bn, bk, nw)) for bn, bk, nw in SWEEP if bk <= max(512, 2 * ws[0].shape[1]))
        out.append((f"best PDL {cfg}", t))
    for bn, bk, nw in tiles:
        out.append((f"PDL {(bn, bk, nw)}", time_us(lambda i: gemv(x, ws[i], block_n=bn, block_k=bk, num_warps=nw),
                                                   copies)))
    pdl.ENABLED = False
    return out


def chain_ms(model: str, dev: torch.device) -> list[str]:
    """A whole model's batch-1 GEMVs in one CUDA graph (every layer's own weights, each GEMV reading the one
    before's output, then the LM head): ms per pass and TB/s for cuBLAS, the GEMV and the GEMV with PDL.
    Tells a model-sized stream of weights (16 GB for 8B) from the per-shape numbers above (<= 256 MB)."""
    hidden, inter, heads, kv, dim, vocab = MODELS[model]
    layers = {"qwen3-0.6b": 28, "qwen3-8b": 36}[model]
    sizes = list(shapes(model, 1).values())
    sizes = sizes[:4] * layers + sizes[4:]  # QKV, o, gate/up, down per layer, then the LM head
    ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02 for n, k in sizes]
    nbytes = sum(w.numel() * 2 for w in ws)
    buf = [torch.randn(1, max(n for n, _ in sizes), device=dev, dtype=torch.bfloat16) for _ in range(2)]

    def run(mm):
        for i, w in enumerate(ws):
            mm(buf[i % 2][:, :w.shape[1]], w, buf[(i + 1) % 2][:, :w.shape[0]])

    out = []
    for name, on, mm in (("cuBLAS", False, lambda x, w, y: torch.mm(x, w.t(), out=y)), ("GEMV", False, gemv),
                         ("GEMV PDL", True, gemv)):
        pdl.ENABLED = on
        run(mm)
        ms = replay_ms(lambda mm=mm: run(mm))
        out.append(f"{model} whole-model chain, {len(ws)} GEMVs, {nbytes / 1e9:.2f} GB: {name} {ms:.3f} ms "
                   f"({nbytes / ms / 1e9:.2f} TB/s; floor {nbytes / HBM_BYTES_S * 1e3:.3f} ms)")
        print(out[-1], flush=True)
    pdl.ENABLED = False
    ws.clear()
    torch.cuda.empty_cache()
    return out


def tile(text: str) -> tuple[int, int, int]:
    """``--tiles``' "block_n,block_k,num_warps": three powers of two."""
    parts = text.split(",")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 and int(p) & (int(p) - 1) == 0 for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not BLOCK_N,BLOCK_K,WARPS (three powers of two)")
    return int(parts[0]), int(parts[1]), int(parts[2])


def main() -> None:
    ap = OneLineParser()
    ap.add_argument("--sweep", action="store_true", help="also the best of a tile grid, with PDL")
    ap.add_argument("--tp", default="1,2", help="tensor-parallel sizes whose shards to time (default 1,2)")
    ap.add_argument("--chain", action="store_true", help="also each model's whole chain of GEMVs in one graph")
    ap.add_argument("--models", default=",".join(MODELS), help=f"which of {', '.join(MODELS)} (default all)")
    ap.add_argument("--tiles", nargs="+", default=[], type=tile, metavar="BLOCK_N,BLOCK_K,WARPS",
                    help="also these tiles, with PDL (powers of two, e.g. 1,4096,4)")
    ap.add_argument("--out")
    args = ap.parse_args()
    dev = torch.device("cuda")
    assert set_pdl(True, dev), "PDL needs compute capability >= 9.0 and a Triton with launch_pdl"
    lines = [f"GPU {torch.cuda.get_device_name()}, torch {torch.version.__version__}; bf16, batch 1; us per call "
             f"(% of {HBM_BYTES_S / 1e12:.1f} TB/s); floor = weight bytes / that bandwidth", ""]
    print("\n".join(lines), flush=True)
    models = args.models.split(",")
    if unknown := set(models) - set(MODELS):
        ap.error(f"--models: unknown {', '.join(sorted(unknown))} (known: {', '.join(MODELS)})")
    for model, tp in itertools.product(models, (int(t) for t in args.tp.split(","))):
        for layer, (n, k) in shapes(model, tp).items():
            copies = max(2, min(64, (256 << 20) // (n * k * 2)))
            ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
            x = torch.randn(1, k, device=dev, dtype=torch.bfloat16)
            ref = x.double() @ ws[0].double().T
            for on in (False, True):
                pdl.ENABLED = on
                err = (gemv(x, ws[0]).double() - ref).abs().max().item()
                assert err <= 0.01 * ref.abs().max().item(), f"{model} {layer} pdl={on}: error {err}"
            floor = n * k * 2 / HBM_BYTES_S * 1e6
            timed = variants(x, ws, args.sweep, args.tiles)
            cells = "; ".join(f"{name} {t:.2f} ({floor / t:.0%})" for name, t in timed)
            line = f"{model} tp={tp} {layer} {n}x{k} floor {floor:.2f} us: {cells}"
            lines.append(line)
            print(line, flush=True)
            ws.clear()  # free this shape's copies before the next
            torch.cuda.empty_cache()
    for model in models if args.chain else ():
        lines += chain_ms(model, dev)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
