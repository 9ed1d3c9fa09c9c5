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


def test_a_folded_norm_gives_the_projection_it_gave_before():
    """``RMSNorm.fold_into``: ``(g * norm(x)) W^T = norm(x) (W diag(g))^T`` (float32, one rounding), g then ones."""
    torch.manual_seed(1)
    norm, w = RMSNorm(64, 1e-6), torch.randn(16, 64)
    norm.weight.data = torch.rand(64) + 0.5
    h = torch.randn(3, 64)
    want = norm(h) @ w.T
    norm.fold_into(w)
    assert norm.folded and torch.equal(norm.weight, torch.ones(64))
    torch.testing.assert_close(norm(h) @ w.T, want, rtol=1e-5, atol=1e-5)


def _as_kernels(monkeypatch, calls: list):
    """The Triton GEMVs' semantics in torch (``gemv.py``), installed as if ``llm.gemm`` were triton on CUDA;
    ``calls`` gets each GEMV's mode."""
    from engine import model_runner
    from engine.layers.fusion import add_rms_norm

    def gemv(x, w, out=None, add=None, norm=None):
        calls.append("add" if add is not None else "norm" if norm is not None else "plain")
        y = x.double() @ w.double().T
        y = (y / torch.sqrt(norm[0].double() / x.shape[-1] + norm[1]) if norm is not None else y).to(x.dtype)
        if add is not None:
            y = y + add[0]
            add[1].add_(y.float().pow(2).sum())
        return y

    def norm_gemv(h, res, nw, eps, w, swiglu=False, sum_sq=None):
        calls.append("sum_sq" if sum_sq is not None else "norm_gemv")
        x, new_res = (add_rms_norm(h, res, nw, eps) if res is not None else (gemm_norm(h, nw, eps), h))
        if sum_sq is not None:
            x = h / torch.sqrt(sum_sq / h.shape[-1] + eps)
        y = x @ w.T
        return (ElementwiseOps().silu_and_mul(y) if swiglu else y), new_res

    def gemm_norm(h, nw, eps):
        return h if nw is None else ElementwiseOps().rms_norm(h, nw, eps)

    def set_gemm(mode, device):
        monkeypatch.setattr(gemm, "_gemv", gemv)
        monkeypatch.setattr(gemm, "_norm_gemv", norm_gemv)
        monkeypatch.setattr(gemm, "_rms_norm", lambda h, res, nw, eps: add_rms_norm(h, res, nw, eps))
        return "triton"
    monkeypatch.setattr(model_runner, "set_gemm", set_gemm)


@pytest.fixture(scope="module")
def tiny_biased_norms(tmp_path_factory) -> str:
    """Qwen3 with ``attention_bias`` (q/k/v and o_proj biases, drawn) and drawn norm weights."""
    from helpers import biased_checkpoint, with_drawn_norms

    root = tmp_path_factory.mktemp("biased")
    return with_drawn_norms(biased_checkpoint(root / "plain"), str(root / "norms"), seed=9)


@pytest.mark.parametrize("checkpoint, adds, scaled", [("tiny_norms", 2, 1), ("tiny_biased_norms", 1, 0)])
def test_batch_1_with_folded_norms_and_summed_squares_gives_transformers_logits(checkpoint, adds, scaled, request,
                                                                                monkeypatch):
    """The wiring of the batch-1 path on CUDA (norms folded at load; o_proj and down_proj add the residual and
    sum the squares; QKV and gate/up scale by 1 / rms; the final norm on the Summed row), with the kernels'
    semantics in torch: every step's logits of one sequence within float32 noise of transformers' (a wrong sum
    moves them by >= 8e-5, session 42's review) and its greedy tokens equal. With biases, o_proj (biased) leaves
    the residual to the norm after it, and QKV (biased) normalises its Summed row unfused."""
    from helpers import hf_greedy, prompts_of_lengths
    from transformers import Qwen3ForCausalLM as HFQwen3

    from engine import LLM, SamplingParams
    from engine.models.qwen3 import Qwen3ForCausalLM

    path = request.getfixturevalue(checkpoint)
    calls, logits = [], []
    _as_kernels(monkeypatch, calls)
    compute = Qwen3ForCausalLM.compute_logits
    monkeypatch.setattr(Qwen3ForCausalLM, "compute_logits", lambda self, h: logits.append(compute(self, h)) or
                        logits[-1])
    prompt = prompts_of_lengths([7])[0]
    with LLM(path, device="cpu", dtype="float32", kvcache_block_size=16, max_model_len=128) as llm:
        got = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))[0]["token_ids"]
    assert got == hf_greedy(path, [prompt], 8)[0]
    with torch.no_grad():
        want = HFQwen3.from_pretrained(path, dtype=torch.float32)(torch.tensor([prompt + got])).logits[0, 6:14]
    err = ((torch.cat(logits) - want).norm(dim=-1) / want.norm(dim=-1)).max().item()
    assert err < 1e-5, f"relative error {err:.1e}"
    # 7 decode steps of 2 layers: o_proj and down_proj add; QKV and gate/up scale from the sums
    assert calls.count("add") == 7 * 2 * adds and calls.count("norm") == 7 * scaled
    assert calls.count("sum_sq") == 7 * 2 * (adds == 2)
