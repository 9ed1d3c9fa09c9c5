"""Weights into L2 while HBM would idle: a kernel of ``prefetch.global.L2`` hints for up to three weights,
launched before a stage that reads little from HBM (decode attention at batch 1), so that the GEMVs after it
find their weights in L2 (Hazy Research's "No Bubbles": keep HBM streaming across kernel boundaries).

A program issues its hints before the PDL wait (weights are written by no kernel of the step), then waits and
returns without writing: the chain's rule of ``pdl.py`` holds. CUDA sm_80+ only (inline PTX).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import pdl

LINE = 128  # bytes per hint: an L2 line


@triton.jit
def _hint(base, line, n_lines):
    p = base + tl.maximum(tl.minimum(line, n_lines - 1), 0).to(tl.int64) * 128
    tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [p], dtype=tl.int32,
                              is_pure=False, pack=1)


@triton.jit
def _prefetch_kernel(a_ptr, a_lines, b_ptr, b_lines, c_ptr, c_lines, LINES: tl.constexpr, PDL: tl.constexpr):
    offs = tl.program_id(0) * LINES + tl.arange(0, LINES)
    step = tl.num_programs(0) * LINES
    for start in range(0, a_lines + b_lines + c_lines, step):
        line = start + offs
        if start < a_lines:
            _hint(a_ptr, line, a_lines)
        if (b_lines > 0) & (start + LINES > a_lines) & (start < a_lines + b_lines):
            _hint(b_ptr, line - a_lines, b_lines)
        if (c_lines > 0) & (start + LINES > a_lines + b_lines):
            _hint(c_ptr, line - a_lines - b_lines, c_lines)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()


def l2_prefetch(weights: list[torch.Tensor], budget_bytes: int, programs: int = 264) -> None:
    """Hint L2 to load ``weights`` (up to three contiguous CUDA tensors, in order) until ``budget_bytes``."""
    ptrs, lines, left = [], [], budget_bytes
    for w in weights[:3]:
        n = min(w.numel() * w.element_size(), max(left, 0)) // LINE
        ptrs.append(w.view(torch.uint8) if n else weights[0].view(torch.uint8))
        lines.append(n)
        left -= n * LINE
    while len(ptrs) < 3:
        ptrs.append(ptrs[0])
        lines.append(0)
    _prefetch_kernel[(programs,)](ptrs[0], lines[0], ptrs[1], lines[1], ptrs[2], lines[2], LINES=128,
                                  PDL=pdl.ENABLED, launch_pdl=pdl.ENABLED, num_warps=4)
