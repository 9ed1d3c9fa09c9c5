"""``gemm.norm_linear``'s dispatch (CPU): the fused batch-1 kernel only where it was measured to win, and
the unfused path's values everywhere else."""

from __future__ import annotations

import pytest
import torch

from engine.layers import gemm
from engine.layers.fusion import ElementwiseOps
from engine.layers.norm import RMSNorm


@pytest.fixture
def fused_calls(monkeypatch):
    """A stand-in for the Triton kernels that records the row lengths the fused kernel was given."""
    calls = []
    monkeypatch.setattr(gemm, "_gemv", lambda x, w, out=None: x @ w.T)
    monkeypatch.setattr(gemm, "_norm_gemv", lambda h, res, nw, eps, w, swiglu: calls.append(h.shape[-1]) or (h, h))
    return calls


@pytest.mark.parametrize("rows, k, fused", [(1, 1024, True), (1, gemm.NORM_GEMV_MAX_K, True),
                                             (1, 2 * gemm.NORM_GEMV_MAX_K, False), (2, 1024, False)])
def test_the_fused_kernel_takes_batch_1_rows_up_to_the_measured_length(fused_calls, rows, k, fused):
    norm = RMSNorm(k, 1e-6)
    gemm.norm_linear(torch.randn(rows, k), torch.randn(rows, k), norm, torch.randn(8, k))
    assert fused_calls == ([k] if fused else [])


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
