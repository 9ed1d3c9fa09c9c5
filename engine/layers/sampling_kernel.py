"""Sampling in one pass over the logits: a Triton kernel (CUDA machines only).

Each program takes one row and one chunk of the vocabulary, and keeps the best score and its column:
the logit itself for greedy rows (temperature 0), else ``logit / t - log(E)`` with ``E = -log(U)``,
``U`` uniform from Triton's Philox generator keyed by (seed, row, column). The argmax of the latter is a
draw from softmax(logits / t): the exponential race / Gumbel-max trick (Gumbel 1954; Maddison et al.
2014, "A* Sampling"). A second, tiny step picks the best chunk of each row. The logits are read once,
in their own dtype; the float32 softmax, noise and division tensors of the plain torch version (~1.7 GB
of traffic per step at batch 256 and a 152k vocabulary) never exist.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

CHUNK = 8192  # vocabulary columns per program: 19 chunks per row for Qwen3's 151,936


@triton.jit
def _sample_chunk_kernel(logits_ptr, stride_row, temps_ptr, seed, best_ptr, col_ptr, vocab, num_chunks,
                         CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    t = tl.load(temps_ptr + row)
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    best_col = tl.zeros([BLOCK], tl.int32)
    for start in range(0, CHUNK, BLOCK):
        cols = chunk * CHUNK + start + tl.arange(0, BLOCK)
        ok = cols < vocab
        x = tl.load(logits_ptr + row * stride_row + cols, mask=ok, other=float("-inf")).to(tl.float32)
        if t > 0:
            u = tl.rand(seed, row * vocab + cols)
            x = x / t - tl.log(-tl.log(u))  # u = 0 gives -inf: that column never wins
        x = tl.where(ok, x, float("-inf"))
        better = x > best
        best = tl.where(better, x, best)
        best_col = tl.where(better, cols, best_col)
    top = tl.max(best, 0)
    col = tl.min(tl.where(best == top, best_col, vocab), 0)  # the first column among equal maxima
    tl.store(best_ptr + row * num_chunks + chunk, top)
    tl.store(col_ptr + row * num_chunks + chunk, col)


def sample_triton(logits: torch.Tensor, temperatures: torch.Tensor, seed: int) -> torch.Tensor:
    """logits ``[B, V]`` (any float dtype, last dim contiguous), temperatures ``[B]`` float32 on the same
    device (0 = greedy), ``seed`` a non-negative int (one per step) -> token ids ``[B]`` int64."""
    B, V = logits.shape
    num_chunks = triton.cdiv(V, CHUNK)
    best = torch.empty(B, num_chunks, dtype=torch.float32, device=logits.device)
    cols = torch.empty(B, num_chunks, dtype=torch.int32, device=logits.device)
    _sample_chunk_kernel[(B, num_chunks)](logits, logits.stride(0), temperatures, seed, best, cols, V, num_chunks,
                                          CHUNK=CHUNK, BLOCK=1024, num_warps=4)
    return cols.gather(1, best.argmax(dim=1, keepdim=True)).squeeze(1).long()
