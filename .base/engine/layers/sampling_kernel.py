"""``sampler``'s draw in one Triton pass over a rank's logits shard, read once in its own dtype (CUDA only). Each
program takes one row and one chunk of global columns (the shard's own masked in) and keeps the best score and its
column; ``E = -log(U)``, ``U`` from Triton's Philox keyed by (seed, row, global column), one call per four columns
(which keeps the kernel memory-bound). Chunks align to global columns, so a column's noise does not depend on tp. The
seed is read from device memory, so a CUDA graph replays with new seeds. A second kernel keeps each row's best chunk
(one launch where torch took ~12 small ones at batch 1)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

CHUNK = 8192  # most vocabulary columns per program: 19 chunks per row for Qwen3's 151,936
BLOCK = 1024  # columns per loop iteration (four Philox quarters of 256), and the fewest per program
MIN_PROGRAMS = 256  # ~2 per SM: a small batch takes smaller chunks (batch 1: 149 of 1,024 columns)


@triton.jit
def _keep_best(best, best_col, logits_ptr, cols, start, end, t, u):
    """Global columns ``cols`` (the shard holds [start, end)) scored, the logit (greedy) or logit / t - log(-log(u))
    (u = 0 gives -inf: never wins), kept per lane where above ``best`` (a lane keeps its first of equal scores)."""
    ok = (cols >= start) & (cols < end)
    x = tl.load(logits_ptr + cols - start, mask=ok, other=float("-inf")).to(tl.float32)
    x = tl.where(t > 0, x / t - tl.log(-tl.log(u)), x)
    x = tl.where(ok, x, float("-inf"))
    better = x > best
    return tl.where(better, x, best), tl.where(better, cols, best_col)


@triton.jit(do_not_specialize=["vocab_start", "vocab_end"])
def _sample_chunk_kernel(logits_ptr, stride_row, temps_ptr, seed_ptr, best_ptr, col_ptr, vocab_start, vocab_end,
                         first_col, vocab, num_chunks, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    t = tl.load(temps_ptr + row)
    seed = tl.load(seed_ptr)
    row_ptr = logits_ptr + row * stride_row
    Q: tl.constexpr = BLOCK // 4
    lane = tl.arange(0, Q)
    best = tl.full([Q], float("-inf"), tl.float32)
    best_col = tl.zeros([Q], tl.int32)
    for start in range(0, CHUNK, BLOCK):
        base = first_col + chunk * CHUNK + start
        # One Philox call gives four uniforms: one per quarter of the block (offsets unique per row and
        # global column while base + lane < vocab, which holds for every column that is not masked).
        u0, u1, u2, u3 = tl.rand4x(seed, row * vocab + base + lane)
        c0 = base + lane
        best, best_col = _keep_best(best, best_col, row_ptr, c0, vocab_start, vocab_end, t, u0)
        best, best_col = _keep_best(best, best_col, row_ptr, c0 + Q, vocab_start, vocab_end, t, u1)
        best, best_col = _keep_best(best, best_col, row_ptr, c0 + 2 * Q, vocab_start, vocab_end, t, u2)
        best, best_col = _keep_best(best, best_col, row_ptr, c0 + 3 * Q, vocab_start, vocab_end, t, u3)
    top = tl.max(best, 0)
    col = tl.min(tl.where(best == top, best_col, vocab), 0)  # the first column among equal maxima
    tl.store(best_ptr + row * num_chunks + chunk, top)
    tl.store(col_ptr + row * num_chunks + chunk, col)


@triton.jit
def _best_chunk_kernel(best_ptr, col_ptr, out_ptr, num_chunks, PACKED: tl.constexpr, BLOCK_C: tl.constexpr):
    """Per row, the chunks' best as ``sampler.pack`` orders it (score, then the smaller column): the packed int64
    (``PACKED``) or its column as a token id."""
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK_C)
    ok = c < num_chunks
    score = tl.load(best_ptr + row * num_chunks + c, mask=ok, other=float("-inf"))
    col = tl.load(col_ptr + row * num_chunks + c, mask=ok, other=0).to(tl.int64)
    bits = score.to(tl.int32, bitcast=True)
    key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(tl.int64)
    packed = tl.where(ok, key * 4294967296 + (4294967295 - col), -9223372036854775807 - 1)
    top = tl.max(packed, 0)
    if PACKED:
        tl.store(out_ptr + row, top)
    else:
        tl.store(out_ptr + row, 4294967295 - (top & 4294967295))


def sample_shard_triton(logits: torch.Tensor, temperatures: torch.Tensor, seed: torch.Tensor, vocab_start: int,
                        vocab_size: int, packed: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """logits ``[B, V/tp]`` (global columns ``[vocab_start, vocab_start + V/tp)``; any float dtype, last dim
    contiguous), temperatures ``[B]`` float32 (0 = greedy), seed ``[1]`` int64 (0 <= seed < 2**31, one per
    step), all on one CUDA device -> this shard's winner of each row ``[B]`` int64, into ``out`` when given
    (contiguous): ``sampler.pack``'s (score, global column) when ``packed``, else the column (the token id)."""
    B, shard = logits.shape
    first_col = vocab_start // BLOCK * BLOCK  # chunks start on global multiples of BLOCK: tp-independent noise
    chunk = CHUNK
    while chunk > BLOCK and B * triton.cdiv(vocab_start + shard - first_col, chunk) < MIN_PROGRAMS:
        chunk //= 2  # the noise is keyed by the global column: the draw does not depend on the chunk
    num_chunks = triton.cdiv(vocab_start + shard - first_col, chunk)
    best = torch.empty(B, num_chunks, dtype=torch.float32, device=logits.device)
    cols = torch.empty(B, num_chunks, dtype=torch.int32, device=logits.device)
    _sample_chunk_kernel[(B, num_chunks)](logits, logits.stride(0), temperatures, seed, best, cols, vocab_start,
                                          vocab_start + shard, first_col, vocab_size, num_chunks, CHUNK=chunk,
                                          BLOCK=BLOCK, num_warps=4)
    out = torch.empty(B, dtype=torch.int64, device=logits.device) if out is None else out
    _best_chunk_kernel[(B,)](best, cols, out, num_chunks, PACKED=packed,
                             BLOCK_C=max(16, triton.next_power_of_2(num_chunks)), num_warps=1)
    return out
