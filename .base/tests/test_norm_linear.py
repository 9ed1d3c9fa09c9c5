"""``gemm.norm_linear``'s dispatch (CPU): the fused batch-1 kernel only where it was measured to win, and
the unfused path's values everywhere else."""

from __future__ import annotations

import pytest
import torch

from engine.layers import gemm
from engine.layers.fusion import ElementwiseOps, RMSNorm


@pytest.fixture
def fused_calls(monkeypatch):
    """Stand-ins for the Triton kernels that record which ran, with the row length."""
    calls = []
    monkeypatch.setattr(gemm, "_gemv", lambda x, w, out=None: calls.append(("gemv", x.shape[-1])) or x @ w.T)
    monkeypatch.setattr(gemm, "_norm_gemv", lambda h, res, nw, eps, w, swiglu: calls.append(
        ("norm_gemv" if nw is not None else "gemv_swiglu", h.shape[-1])) or (h, h))
    monkeypatch.setattr(gemm, "_rms_norm", lambda h, res, nw, eps: calls.append(("rms_norm", h.shape[-1])) or (h, h))
    return calls


LONG = 2 * gemm.NORM_GEMV_MAX_K


@pytest.mark.parametrize("rows, k, swiglu, kernels", [
    (1, 1024, False, ["norm_gemv"]), (1, gemm.NORM_GEMV_MAX_K, True, ["norm_gemv"]),
    (1, LONG, False, ["rms_norm", "gemv"]), (1, LONG, True, ["rms_norm", "gemv_swiglu"]), (2, 1024, False, [])])
def test_the_fused_kernel_takes_batch_1_rows_up_to_the_measured_length(fused_calls, rows, k, swiglu, kernels):
    """Up to NORM_GEMV_MAX_K one kernel; longer rows the Triton norm, then the GEMV (with SwiGLU); batch > 1
    none of them (cuBLAS after the torch norm)."""
    norm = RMSNorm(k, 1e-6)
    gemm.norm_linear(torch.randn(rows, k), torch.randn(rows, k), norm, torch.randn(8, k),
                     swiglu=ElementwiseOps().silu_and_mul if swiglu else None)
    assert fused_calls == [(name, k) for name in kernels]


def test_the_unfused_path_is_norm_then_matmul_then_swiglu():
    torch.manual_seed(0)
    ops = ElementwiseOps()
    norm = RMSNorm(64, 1e-6, ops)
    norm.weight.data = torch.rand(64) + 0.5
    h, res, w = torch.randn(3, 64), torch.randn(3, 64), torch.randn(16, 64)
    y, new_res = gemm.norm_linear(h, res, norm, w, swiglu=ops.silu_and_mul)
    x, want_res = ops.add_rms_norm(h, res, norm.weight, 1e-6)
    assert torch.equal(new_res, want_res) and torch.equal(y, ops.silu_and_mul(x @ w.T))
    y, same = gemm.norm_linear(h, None, norm, w)
    assert same is h and torch.equal(y, ops.rms_norm(h, norm.weight, 1e-6) @ w.T)
