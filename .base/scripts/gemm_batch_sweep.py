"""cuBLAS's decode GEMMs across batch sizes: ``torch.mm`` (what ``F.linear`` runs for a decode batch > 1) on
each projection of a Qwen3 model at tp=1, bf16, for several M (running sequences), replayed in a CUDA graph.
The weights rotate over copies of >= 256 MB in all, so no call finds its weight in the 50 MB L2.
``--variants`` adds cuBLASLt (torch's ``preferred_blas_library``) and ``autotune``: inductor's max-autotune
search over its Triton GEMM templates and cuBLAS for each shape (it prints its table of candidates).

Prints per shape and M: us per call, the weight bytes' share of 4.3 TB/s, and TFLOP/s; then the four
projections summed per layer. A time that stays flat as M grows past a tile edge is tile quantization.

    python3 scripts/gemm_batch_sweep.py [--model 8b] [--m 64,128,192,208,224,256] [--variants cublas,autotune]
"""

import argparse
import sys

import torch
from gpu_only import graph_ms, require_cuda

# (name, N, K) of each projection's weight [N, K] at tp=1
SHAPES = {
    "0.6b": [("qkv", 4096, 1024), ("o", 1024, 2048), ("gate_up", 6144, 1024), ("down", 1024, 3072)],
    "8b": [("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 24576, 4096), ("down", 4096, 12288)],
}
HBM_TBS = 4.3


def time_calls(mm, x, ws, outs) -> float:
    """us per call of ``mm(x, w, out)`` over the weight copies ``ws`` (outputs ``outs``), one call each in a
    CUDA graph; best of 5 rounds of 20 replays."""
    for w, y in zip(ws, outs):  # warm-up outside the capture (cuBLAS picks its kernel, Triton compiles)
        mm(x, w, y)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for w, y in zip(ws, outs):
            mm(x, w, y)
    graph_ms(graph, 3)
    return min(graph_ms(graph, 20) for _ in range(5)) * 1e3 / len(ws)


def time_mm(m: int, n: int, k: int, copies: int, variant: str = "cublas") -> float:
    """us per ``x [m, k] @ w.T`` for one of ``copies`` weights ``[n, k]``, by ``variant``: cublas, cublaslt or
    autotune (inductor's max-autotune, compiled for this shape)."""
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    outs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    torch.backends.cuda.preferred_blas_library("cublaslt" if variant == "cublaslt" else "cublas")
    if variant != "autotune":
        return time_calls(lambda a, b, c: torch.mm(a, b.t(), out=c), x, ws, outs)
    torch._dynamo.reset()
    mm = torch.compile(lambda a, b: a @ b.t(), mode="max-autotune-no-cudagraphs", dynamic=False)
    return time_calls(lambda a, b, c: mm(a, b), x, ws, outs)  # its output from the graph's pool, no copy


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=SHAPES, default="8b")
    ap.add_argument("--m", default="64,128,160,192,200,208,216,224,240,256")
    ap.add_argument("--variants", default="cublas", help="comma-separated: cublas, cublaslt, autotune")
    args = ap.parse_args()
    variants = args.variants.split(",")
    if bad := set(variants) - {"cublas", "cublaslt", "autotune"}:
        sys.exit(f"error: --variants: unknown {', '.join(sorted(bad))} (cublas, cublaslt, autotune)")
    require_cuda()
    ms = [int(v) for v in args.m.split(",")]
    per_layer = {(v, m): 0.0 for v in variants for m in ms}
    for name, n, k in SHAPES[args.model]:
        nbytes = n * k * 2
        copies = max(2, -(-256 * 2**20 // nbytes))
        for m in ms:
            for v in variants:
                us = time_mm(m, n, k, copies, v)
                per_layer[v, m] += us
                print(f"{args.model} {name:8s} [{n}, {k}] M {m:4d} {v:9s}: {us:7.1f} us  "
                      f"{nbytes / us / 1e6 / HBM_TBS:4.0%} of {HBM_TBS} TB/s  {2 * m * n * k / us / 1e6:6.1f} TFLOP/s",
                      flush=True)
    for m in ms:
        sums = "  ".join(f"{v} {per_layer[v, m]:7.1f} us" for v in variants)
        print(f"{args.model} layer (4 GEMMs) M {m:4d}: {sums}")


if __name__ == "__main__":
    main()
