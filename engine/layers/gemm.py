"""Every linear layer's matmul (``llm.gemm``): cuBLAS through ``F.linear``, or for decode batches of at most
``skinny_gemm.MAX_M`` rows on CUDA the Triton skinny kernel (``skinny_gemm.py``), which reads the weight at
closer to HBM bandwidth than cuBLAS's GEMM tiles do at batch 1-8.

Chosen once per process by the model runner (``set_gemm``), like the all-reduce: process-wide state.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_skinny = None  # skinny_gemm.skinny_linear when on; None: cuBLAS for every batch
_skinny_max_m = 0  # skinny_gemm.MAX_M when on


def set_gemm(mode: str, device: torch.device) -> str:
    """Install the matmul for ``mode`` ("auto", "cublas" or "triton"; config-checked) on ``device``; returns
    what runs: "triton" (the skinny kernel up to MAX_M rows, cuBLAS above), "cublas", or "torch" on CPU.
    "auto" is "triton" on CUDA where Triton imports.

    Raises:
        RuntimeError: ``mode="triton"`` and Triton cannot be imported here.
    """
    global _skinny, _skinny_max_m
    _skinny, _skinny_max_m = None, 0
    if device.type != "cuda":
        return "torch"
    if mode == "cublas":
        return "cublas"
    try:
        from .skinny_gemm import MAX_M, skinny_linear
    except ImportError as e:
        if mode == "triton":
            raise RuntimeError(f"llm.gemm=triton: Triton is not importable here ({e})") from e
        return "cublas"
    _skinny, _skinny_max_m = skinny_linear, MAX_M
    return "triton"


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           out: torch.Tensor | None = None) -> torch.Tensor:
    """x ``[M, K]`` @ weight ``[N, K]``.T (+ bias ``[N]``) -> ``[M, N]``, into ``out`` when given (``[M, N]``,
    unit column stride; no bias then)."""
    if _skinny is not None and x.dim() == 2 and x.shape[0] <= _skinny_max_m and x.stride(1) == 1:
        y = _skinny(x, weight, out=out)
        return y if bias is None else y + bias
    if out is not None:
        return torch.mm(x, weight.t(), out=out)
    return F.linear(x, weight, bias)
