"""A Triton GEMM for decode batches (M <= 256 running sequences) against cuBLAS, on each projection of a Qwen3
model at tp=1, bf16, replayed in a CUDA graph as ``gemm_batch_sweep.py`` does: the candidate for the bench's
GEMMs (issue 27; call 56 measured cuBLAS at 59-89% of the weight bytes' rate on Qwen3-8B's gate_up).

Each program computes a ``[BLOCK_M, BLOCK_N]`` tile of ``x @ W.T`` over K with ``tl.dot``, the weight ``[N, K]``
read in place (no transpose copy). The M tiles of one weight tile are launched next to each other, so the
weight comes from HBM once and from L2 for the others (cuBLAS's 192-row tile at M = 207 runs two M tiles).
Prints, per shape and M, cuBLAS's time and the best tile's, and checks the best tile's result against
``torch.mm`` (float32 accumulation both; relative error); then both summed over a layer's four GEMMs.

    python3 scripts/bench_decode_gemm.py [--model 8b] [--m 128,208,256]
"""

import argparse
import itertools

import torch
from gemm_batch_sweep import HBM_TBS, SHAPES, time_calls
from gpu_only import require_cuda

# M, N, K blocks, stages, warps; an M block past M's next power of 2 (at least 64) is skipped
TILES = list(itertools.product((64, 128, 256), (64, 128, 256), (64, 128), (3, 4), (4, 8)))


def _kernel():
    """The Triton kernel, defined on first use (Triton is not imported on a machine without CUDA)."""
    import triton
    import triton.language as tl

    @triton.jit
    def gemm_kernel(x_ptr, w_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        pid_m, pid_n = tl.program_id(0), tl.program_id(1)  # M fastest: programs next in line share W's tile
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        ks = tl.arange(0, BLOCK_K)
        x_ptrs = x_ptr + rows[:, None] * stride_xm + ks[None, :]
        w_ptrs = w_ptr + cols[:, None].to(tl.int64) * stride_wn + ks[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k_ok = k0 + ks < K
            x = tl.load(x_ptrs, mask=(rows < M)[:, None] & k_ok[None, :], other=0.0)
            w = tl.load(w_ptrs, mask=(cols < N)[:, None] & k_ok[None, :], other=0.0)
            acc = tl.dot(x, tl.trans(w), acc)
            x_ptrs += BLOCK_K
            w_ptrs += BLOCK_K
        tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], acc.to(y_ptr.dtype.element_ty),
                 mask=(rows < M)[:, None] & (cols < N)[None, :])

    return triton, gemm_kernel


def triton_mm(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, tile: tuple) -> torch.Tensor:
    """x ``[M, K]`` @ w ``[N, K]``.T -> out ``[M, N]`` (all unit stride along the last dim) with ``tile``:
    (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps)."""
    triton, kernel = _kernel()
    bm, bn, bk, stages, warps = tile
    (m, k), n = x.shape, w.shape[0]
    kernel[(triton.cdiv(m, bm), triton.cdiv(n, bn))](x, w, out, m, n, k, x.stride(0), w.stride(0), out.stride(0),
                                                      BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_stages=stages,
                                                      num_warps=warps)
    return out


def compare(m: int, n: int, k: int) -> tuple[float, float, tuple, float]:
    """(cuBLAS us, the best tile's us, that tile, its relative error against torch.mm) at one shape."""
    copies = max(2, -(-256 * 2**20 // (n * k * 2)))  # >= 256 MB of weights: none stays in L2
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5 for _ in range(copies)]
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    outs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    cublas = time_calls(lambda a, b, c: torch.mm(a, b.t(), out=c), x, ws, outs)
    best = (float("inf"), None)
    for tile in TILES:
        if tile[0] > max(64, 1 << (m - 1).bit_length()):
            continue
        try:
            best = min(best, (time_calls(lambda a, b, c, t=tile: triton_mm(a, b, c, t), x, ws, outs), tile))
        except Exception as e:  # a tile that does not fit (shared memory, registers) is skipped
            print(f"  tile {tile}: {type(e).__name__}")
    want = torch.mm(x, ws[0].t()).float()
    err = (triton_mm(x, ws[0], outs[0], best[1]).float() - want).norm() / want.norm()
    return cublas, best[0], best[1], float(err)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=SHAPES, default="8b")
    ap.add_argument("--m", default="64,128,208,256")
    args = ap.parse_args()
    require_cuda()
    ms = [int(v) for v in args.m.split(",")]
    layer = {m: [0.0, 0.0] for m in ms}
    for (name, n, k), m in itertools.product(SHAPES[args.model], ms):
        cublas, best, tile, err = compare(m, n, k)
        layer[m][0] += cublas
        layer[m][1] += best
        floor = n * k * 2 / HBM_TBS / 1e6
        print(f"{args.model} {name:8s} [{n}, {k}] M {m:4d}: cuBLAS {cublas:6.1f} us, Triton {best:6.1f} us "
              f"({cublas / best:.2f}x) tile {tile}, bytes floor {floor:5.1f} us, error {err:.1e}", flush=True)

    for m, (cublas, best) in layer.items():
        print(f"{args.model} layer (4 GEMMs) M {m:4d}: cuBLAS {cublas:6.1f} us, best Triton tiles {best:6.1f} us")


if __name__ == "__main__":
    main()
