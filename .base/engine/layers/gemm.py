"""Every linear layer's matmul (``llm.gemm``): cuBLAS through ``F.linear``, or on CUDA at batch 1 the Triton GEMV
(``gemv.py``), which ``norm_linear`` fuses with the RMSNorm before it (``gemv.norm_gemv``) so that no torch kernel
breaks the PDL chain. Chosen once per process by the model runner (``set_gemm``): process-wide state."""

from __future__ import annotations

import torch
import torch.nn.functional as F

_gemv = None  # gemv.gemv when on; None: cuBLAS for every matmul
_norm_gemv = None  # gemv.norm_gemv, on with _gemv
_rms_norm = None  # gemv.add_rms_norm: the norm of a row too long to fuse, in the GEMVs' PDL chain
# Longer rows take the norm and the GEMV apart: each program of the fused kernel re-sums the row's squares.
NORM_GEMV_MAX_K = 2048


def set_gemm(mode: str, device: torch.device) -> str:
    """Install the matmul for ``mode`` (auto, cublas or triton) on ``device``; returns what runs: "triton"
    (the GEMV at batch 1, cuBLAS otherwise; what auto gives where Triton imports), "cublas", or "torch" on CPU.
    Raises RuntimeError: ``mode="triton"`` and Triton cannot be imported here."""
    global _gemv, _norm_gemv, _rms_norm
    _gemv = _norm_gemv = _rms_norm = None
    if device.type != "cuda" or mode == "cublas":
        return "torch" if device.type != "cuda" else "cublas"
    try:
        from .gemv import add_rms_norm, gemv, norm_gemv
    except ImportError as e:
        if mode == "triton":
            raise RuntimeError(f"llm.gemm=triton: Triton is not importable here ({e})") from e
        return "cublas"
    _gemv, _norm_gemv, _rms_norm = gemv, norm_gemv, add_rms_norm
    return "triton"


def _gemv_fits(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the Triton GEMV is on and takes x ``[1, K]`` @ weight ``[N, K]``.T."""
    return (_gemv is not None and x.dim() == 2 and weight.dim() == 2 and x.shape[0] == 1 and x.stride(1) == 1
            and weight.stride(1) == 1 and x.shape[1] == weight.shape[1] and weight.dtype == x.dtype)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           out: torch.Tensor | None = None) -> torch.Tensor:
    """x ``[M, K]`` @ weight ``[N, K]``.T (+ bias ``[N]``) -> ``[M, N]``, into ``out`` (unit column stride).
    Raises ValueError: both ``bias`` and ``out`` given (the sum would not land in ``out``)."""
    if bias is not None and out is not None:
        raise ValueError("linear: bias and out together are not supported")
    if _gemv_fits(x, weight) and (out is None or out.dtype == x.dtype):
        y = _gemv(x, weight, out=out)
        return y if bias is None else y + bias
    if out is not None:
        return torch.mm(x, weight.t(), out=out)
    return F.linear(x, weight, bias)


def norm_linear(h: torch.Tensor, residual: torch.Tensor | None, norm, weight: torch.Tensor,
                bias: torch.Tensor | None = None, swiglu=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(``swiglu(norm(h + residual) @ weight.T (+ bias))``, swiglu when given; the new residual ``h + residual``,
    or h when ``residual`` is None). h ``[M, K]``, ``norm`` an ``RMSNorm`` over K, weight ``[N, K]``. At batch 1
    with the Triton GEMV (``swiglu`` then SiLU-and-mul of the halves): one ``norm_gemv`` for K <=
    ``NORM_GEMV_MAX_K``, else the Triton norm then the GEMV; otherwise norm, matmul, ``swiglu`` in turn."""
    if (_norm_gemv is not None and bias is None and h.is_contiguous() and norm.weight.dtype == h.dtype
            and _gemv_fits(h, weight) and (residual is None or residual.is_contiguous())):
        if h.shape[-1] <= NORM_GEMV_MAX_K:
            return _norm_gemv(h, residual, norm.weight, norm.eps, weight, swiglu is not None)
        x, residual = _rms_norm(h, residual, norm.weight, norm.eps)
        y = _norm_gemv(x, None, None, 0.0, weight, True)[0] if swiglu is not None else _gemv(x, weight)
        return y, residual
    x, residual = (norm(h), h) if residual is None else norm(h, residual)
    y = linear(x, weight, bias)
    return (swiglu(y) if swiglu is not None else y), residual
