"""Every linear layer's matmul (``llm.gemm``): cuBLAS through ``F.linear``, or on CUDA with Triton at batch 1 the GEMV
(``gemv.py``) and at 2 to ``norm_gemm.MAX_M`` rows (a decode batch) the GEMM of ``norm_gemm.py``, each fused by
``norm_linear`` with the RMSNorm before it (and SwiGLU after gate/up), so that no torch kernel breaks the PDL chain.
Chosen once per process by the model runner (``set_gemm``): process-wide state."""

from __future__ import annotations

import torch
import torch.nn.functional as F

_gemv = None  # gemv.gemv when on; None: cuBLAS for every matmul
_norm_gemv = None  # gemv.norm_gemv, on with _gemv
_rms_norm = None  # gemv.add_rms_norm: the norm of a row too long to fuse, in the GEMVs' PDL chain
_norm_gemm = None  # norm_gemm.norm_gemm (decode batches of 2 to MAX_M rows), on with _gemv
_MAX_M = 0
# Longer rows take the norm and the GEMV apart: each program of the fused kernel re-sums the row's squares.
NORM_GEMV_MAX_K = 2048


def set_gemm(mode: str, device: torch.device) -> str:
    """Install the matmul for ``mode`` (auto, cublas or triton) on ``device``; returns what runs: "triton"
    (the GEMV at batch 1, the fused GEMM to ``norm_gemm.MAX_M`` rows, cuBLAS past it; what auto gives where Triton
    imports), "cublas", or "torch" on CPU.
    Raises RuntimeError: ``mode="triton"`` and Triton cannot be imported here."""
    global _gemv, _norm_gemv, _rms_norm, _norm_gemm, _MAX_M
    _gemv = _norm_gemv = _rms_norm = _norm_gemm = None
    if device.type != "cuda" or mode == "cublas":
        return "torch" if device.type != "cuda" else "cublas"
    try:
        from .gemv import add_rms_norm, gemv, norm_gemv
        from .norm_gemm import MAX_M, norm_gemm
    except ImportError as e:
        if mode == "triton":
            raise RuntimeError(f"llm.gemm=triton: Triton is not importable here ({e})") from e
        return "cublas"
    _gemv, _norm_gemv, _rms_norm, _norm_gemm, _MAX_M = gemv, norm_gemv, add_rms_norm, norm_gemm, MAX_M
    return "triton"


def _triton_rows(x: torch.Tensor, weight: torch.Tensor) -> int:
    """x's rows when a Triton kernel is on and takes x ``[M, K]`` @ weight ``[N, K]``.T (M <= ``_MAX_M``), else 0."""
    ok = (_gemv is not None and x.dim() == 2 and weight.dim() == 2 and x.shape[0] <= _MAX_M and x.stride(1) == 1
          and weight.stride(1) == 1 and x.shape[1] == weight.shape[1] and weight.dtype == x.dtype)
    return x.shape[0] if ok else 0


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           out: torch.Tensor | None = None) -> torch.Tensor:
    """x ``[M, K]`` @ weight ``[N, K]``.T (+ bias ``[N]``) -> ``[M, N]``, into ``out`` (unit column stride).
    Raises ValueError: both ``bias`` and ``out`` given (the sum would not land in ``out``)."""
    if bias is not None and out is not None:
        raise ValueError("linear: bias and out together are not supported")
    rows = _triton_rows(x, weight) if out is None or out.dtype == x.dtype else 0
    if rows:
        y = _gemv(x, weight, out=out) if rows == 1 else _norm_gemm(x, None, None, 0.0, weight, out=out)[0]
        return y if bias is None else y + bias
    if out is not None:
        return torch.mm(x, weight.t(), out=out)
    return F.linear(x, weight, bias)


def norm_linear(h: torch.Tensor, residual: torch.Tensor | None, norm, weight: torch.Tensor,
                bias: torch.Tensor | None = None, swiglu=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(``swiglu(norm(h + residual) @ weight.T (+ bias))``, swiglu when given; the new residual ``h + residual``,
    or h when ``residual`` is None). h ``[M, K]``, ``norm`` an ``RMSNorm`` over K, weight ``[N, K]``. At batch 1
    with the Triton GEMV (``swiglu`` then SiLU-and-mul of the halves): one ``norm_gemv`` for K <=
    ``NORM_GEMV_MAX_K``, else the Triton norm then the GEMV; at 2 to ``norm_gemm.MAX_M`` rows one ``norm_gemm``;
    otherwise norm, matmul, ``swiglu`` in turn."""
    rows = (_triton_rows(h, weight) if bias is None and h.is_contiguous() and norm.weight.dtype == h.dtype
            and (residual is None or residual.is_contiguous()) else 0)
    if rows > 1:
        return _norm_gemm(h, residual, norm.weight, norm.eps, weight, swiglu is not None)
    if rows == 1:
        if h.shape[-1] <= NORM_GEMV_MAX_K:
            return _norm_gemv(h, residual, norm.weight, norm.eps, weight, swiglu is not None)
        x, residual = _rms_norm(h, residual, norm.weight, norm.eps)
        y = _norm_gemv(x, None, None, 0.0, weight, True)[0] if swiglu is not None else _gemv(x, weight)
        return y, residual
    x, residual = (norm(h), h) if residual is None else norm(h, residual)
    y = linear(x, weight, bias)
    return (swiglu(y) if swiglu is not None else y), residual
