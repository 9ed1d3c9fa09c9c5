"""The model's small elementwise functions (RMSNorm, RoPE, SiLU-and-mul), fusable with torch.compile.

Each is several tiny kernels in eager mode (RMSNorm alone: cast, square, mean, rsqrt, two multiplies,
cast back), and a decode step runs ~100 of them per layer: on a GPU their launch cost, not their bytes,
dominates. ``compile_elementwise()`` swaps in torch.compile'd versions (one Triton kernel each); the
model runner calls it on CUDA unless ``enforce_eager``. CPU runs keep the eager functions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    cos, sin = cos.unsqueeze(1).to(q.dtype), sin.unsqueeze(1).to(q.dtype)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


IMPL = {"rms_norm": rms_norm, "apply_rotary": apply_rotary, "silu_and_mul": silu_and_mul}


def compile_elementwise() -> None:
    """Replace the eager functions by compiled ones, for every model in this process (idempotent)."""
    for name, fn in list(IMPL.items()):
        if not hasattr(fn, "_torchdynamo_orig_callable"):
            IMPL[name] = torch.compile(fn, dynamic=True)
