"""The model's small elementwise functions and the modules holding their parameters (:class:`RMSNorm`,
:class:`RotaryEmbedding`). Eager, each is several tiny kernels (launch-bound on a GPU); on CUDA unless ``enforce_eager``
the model runner switches a model's :class:`ElementwiseOps` to torch.compile'd versions (one Triton kernel each)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm (Zhang & Sennrich 2019, as Qwen3 computes it: in float32, scaled in the input dtype):
    ``x [..., d]``, ``weight [d]`` -> ``[..., d]``."""
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float):
    """(rms_norm(x + residual), x + residual): the residual add and the next norm in one kernel (vLLM's
    fused_add_rms_norm); the sum is rounded to x's dtype first, exactly as the unfused ``h + f(h)``."""
    residual = x + residual
    return rms_norm(residual, weight, eps), residual


def qk_norm_rotary(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor, eps: float,
                   cos: torch.Tensor, sin: torch.Tensor):
    """Qwen3's per-head RMSNorm of q ``[N, Hq, D]`` and k ``[N, Hkv, D]``, then RoPE (Su et al. 2021) at cos/sin
    ``[N, D]`` -> (q, k), same shapes and dtype."""
    q, k = rms_norm(q, q_weight, eps), rms_norm(k, k_weight, eps)
    cos, sin = cos.unsqueeze(1).to(q.dtype), sin.unsqueeze(1).to(q.dtype)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[..., d]`` -> ``[..., d]``: the halves (x1, x2) become (-x2, x1), RoPE's rotation (HF layout)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SwiGLU: ``gate_up [N, 2 * inter]`` -> ``silu(gate) * up`` ``[N, inter]``."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


EAGER = {fn.__name__: fn for fn in (rms_norm, add_rms_norm, qk_norm_rotary, silu_and_mul)}
_COMPILED: dict = {}  # torch.compile'd versions, made once per process (compiling is slow)


class ElementwiseOps:
    """The elementwise functions a model's layers call (``ops.rms_norm(...)``): eager until :meth:`use_compiled`."""

    def __init__(self):
        self.__dict__.update(EAGER)

    def use_compiled(self) -> None:
        if not _COMPILED:
            _COMPILED.update({name: torch.compile(fn, dynamic=True) for name, fn in EAGER.items()})
        self.__dict__.update(_COMPILED)


class RMSNorm(nn.Module):
    """x ``[..., dim]`` -> ``rms_norm(x)``, same shape and dtype; with ``residual``, ``(rms_norm(x + residual),
    x + residual)``. ``ops``: the model's elementwise functions (its own eager set when not given)."""

    def __init__(self, dim: int, eps: float, ops: ElementwiseOps | None = None):
        super().__init__()
        self.eps = eps
        self.ops = ops or ElementwiseOps()
        self.weight = nn.Parameter(torch.ones(dim), requires_grad=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is None:
            return self.ops.rms_norm(x, self.weight, self.eps)
        return self.ops.add_rms_norm(x, residual, self.weight, self.eps)


class RotaryEmbedding(nn.Module):
    """RoPE's cos/sin ("rotate half" layout, as transformers' Qwen3: inv_freq_i = theta^(-2i / head_dim)),
    precomputed in float32 for positions ``[0, max_positions)``: positions ``[N]`` -> cos, sin ``[N, D]`` (views of
    one ``[N, 2 D]`` gather: rows of stride 2 D)."""

    def __init__(self, head_dim: int, max_positions: int, theta: float):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        freqs = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_sin", torch.cat((emb.cos(), emb.sin()), dim=-1), persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cos_sin[positions].chunk(2, dim=-1)
