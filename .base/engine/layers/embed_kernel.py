"""A step's embedding lookup in one Triton launch (CUDA only; ``TRITON_INTERPRET=1`` runs it on the CPU): token ids,
placeholders ``-(r + 1)`` read from the last step's sampled tokens, -> rows of this rank's shard of the table, zeros
for ids outside it. At batch 1 torch took ~8 small kernels for this (the placeholders, the shard mask, the lookup)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import pdl


@triton.jit
def _embed_kernel(ids_ptr, prev_ptr, w_ptr, out_ptr, H, vocab_start, vocab_end, BLOCK_H: tl.constexpr,
                  PDL: tl.constexpr):
    if PDL:  # nothing to load before the wait: the ids are this step's input
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    tok = tl.load(ids_ptr + row)
    tok = tl.where(tok < 0, tl.load(prev_ptr + tl.maximum(-tok - 1, 0)), tok)
    in_shard = (tok >= vocab_start) & (tok < vocab_end)
    x = tl.load(w_ptr + (tok - vocab_start) * H + cols, mask=in_shard & (cols < H), other=0.0)
    tl.store(out_ptr + row * H + cols, x, mask=cols < H)


def embed(ids: torch.Tensor, previous: torch.Tensor | None, weight: torch.Tensor, vocab_start: int) -> torch.Tensor:
    """ids ``[N]`` int64 (``-(r + 1)`` stands for ``previous[r]``), previous ``[B_prev]`` int64 or None (no
    placeholders), weight ``[V/tp, H]`` contiguous, the table's rows from ``vocab_start`` -> ``[N, H]`` in weight's
    dtype."""
    n, h = ids.shape[0], weight.shape[1]
    out = torch.empty(n, h, dtype=weight.dtype, device=weight.device)
    block = min(triton.next_power_of_2(h), 1024)
    _embed_kernel[(n, triton.cdiv(h, block))](ids, ids if previous is None else previous, weight, out, h, vocab_start,
                                              vocab_start + weight.shape[0], BLOCK_H=block, PDL=pdl.ENABLED,
                                              launch_pdl=pdl.ENABLED, num_warps=4)
    return out
