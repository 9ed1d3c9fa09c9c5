"""``gemm.norm_linear``'s dispatch (CPU): the fused batch-1 kernel only where it was measured to win, the fused
decode-batch GEMM up to its row limit, and the unfused path's values everywhere else; the fused GEMM's kernel
under Triton's interpreter."""

from __future__ import annotations

import os
import subprocess
import sys

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
    monkeypatch.setattr(gemm, "_norm_gemm", lambda h, res, nw, eps, w, swiglu=False, out=None: calls.append(
        ("norm_gemm" if nw is not None else "gemm", h.shape[-1])) or (h, h))
    monkeypatch.setattr(gemm, "_MAX_M", 256)
    return calls


LONG = 2 * gemm.NORM_GEMV_MAX_K


@pytest.mark.parametrize("rows, k, swiglu, kernels", [
    (1, 1024, False, ["norm_gemv"]), (1, gemm.NORM_GEMV_MAX_K, True, ["norm_gemv"]),
    (1, LONG, False, ["rms_norm", "gemv"]), (1, LONG, True, ["rms_norm", "gemv_swiglu"]),
    (2, 1024, False, ["norm_gemm"]), (256, LONG, True, ["norm_gemm"]), (257, 1024, False, [])])
def test_the_fused_kernel_takes_batch_1_rows_up_to_the_measured_length(fused_calls, rows, k, swiglu, kernels):
    """Batch 1 up to NORM_GEMV_MAX_K one kernel; longer rows the Triton norm, then the GEMV (with SwiGLU); 2 to
    MAX_M rows the fused GEMM at every length; more rows none of them (cuBLAS after the torch norm)."""
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


def test_linear_takes_the_gemv_at_one_row_and_the_gemm_to_max_m(fused_calls):
    for rows in (1, 2, 256, 257):
        gemm.linear(torch.randn(rows, 64), torch.randn(8, 64))
    assert fused_calls == [("gemv", 64), ("gemm", 64), ("gemm", 64)]


INTERPRETED = """
import torch
from engine.layers.fusion import add_rms_norm, rms_norm, silu_and_mul
from engine.layers.norm_gemm import norm_gemm
torch.manual_seed(0)
for m, k, n, swiglu, res, norm, tile in [(3, 96, 40, False, True, True, (16, 32, 64, 4, 2)),
                                         (17, 64, 64, True, True, True, (16, 16, 32, 4, 3)),
                                         (5, 200, 33, False, False, False, None),
                                         (2, 128, 48, True, False, True, None)]:
    h, r = torch.randn(m, k), torch.randn(m, k) if res else None
    nw, w = torch.rand(k) + 0.5 if norm else None, torch.randn(n, k) / k ** 0.5
    y, new_res = norm_gemm(h, r, nw, 1e-6, w, swiglu, tile=tile)
    x, want_res = (add_rms_norm(h, r, nw, 1e-6) if res else (rms_norm(h, nw, 1e-6), h)) if norm else (h, h)
    want = silu_and_mul(x @ w.T) if swiglu else x @ w.T
    err = ((y - want).norm() / want.norm()).item()
    assert y.shape == want.shape and err < 1e-5 and torch.equal(new_res, want_res), (m, k, n, err)
print("ok")
"""


def test_norm_gemm_kernel_matches_the_unfused_path_under_the_interpreter():
    """float32 through the Triton kernel itself (``TRITON_INTERPRET=1``): partial row, column and K tiles, the
    residual written once, SwiGLU's halves, no norm."""
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", INTERPRETED], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
