"""Every linear layer's matmul (``llm.gemm``): cuBLAS through ``F.linear``, or on CUDA at batch 1 the Triton
GEMV (``gemv.py``), which reads the weight closer to HBM bandwidth than cuBLAS's latency-bound GEMM
kernels do (most of all for a tensor-parallel rank's small shards).

Chosen once per process by the model runner (``set_gemm``), like the all-reduce: process-wide state.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_gemv = None  # gemv.gemv when on; None: cuBLAS for every matmul


def set_gemm(mode: str, device: torch.device) -> str:
    """Install the matmul for ``mode`` ("auto", "cublas" or "triton"; config-checked) on ``device``; returns
    what runs: "triton" (the GEMV at batch 1, cuBLAS otherwise), "cublas", or "torch" on
    CPU. "auto" is "triton" on CUDA where Triton imports.

    Raises:
        RuntimeError: ``mode="triton"`` and Triton cannot be imported here.
    """
    global _gemv
    _gemv = None
    if device.type != "cuda" or mode == "cublas":
        return "torch" if device.type != "cuda" else "cublas"
    try:
        from .gemv import gemv
    except ImportError as e:
        if mode == "triton":
            raise RuntimeError(f"llm.gemm=triton: Triton is not importable here ({e})") from e
        return "cublas"
    _gemv = gemv
    return "triton"


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           out: torch.Tensor | None = None) -> torch.Tensor:
    """x ``[M, K]`` @ weight ``[N, K]``.T (+ bias ``[N]``) -> ``[M, N]``, into ``out`` when given (``[M, N]``,
    unit column stride).

    Raises:
        ValueError: both ``bias`` and ``out`` given (the sum would not land in ``out``).
    """
    if bias is not None and out is not None:
        raise ValueError("linear: bias and out together are not supported")
    if (_gemv is not None and x.dim() == 2 and x.shape[0] == 1 and x.stride(1) == 1 and weight.dim() == 2
            and weight.stride(1) == 1 and weight.dtype == x.dtype and (out is None or out.dtype == x.dtype)):
        y = _gemv(x, weight, out=out)
        return y if bias is None else y + bias
    if out is not None:
        return torch.mm(x, weight.t(), out=out)
    return F.linear(x, weight, bias)
