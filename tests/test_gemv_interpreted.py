"""The batch-1 Triton GEMVs (``engine/layers/gemv.py``) run by Triton's interpreter on the CPU
(``TRITON_INTERPRET=1``, read when a kernel is defined, so in a fresh process): a row of one tile and of several
tiles (the next tile loaded before this one's sum, call 94) against float64."""

from __future__ import annotations

import pytest
from helpers import run_interpreted

pytest.importorskip("triton")

CHECK = r"""
import torch
from engine.layers.gemv import gemv, norm_gemv, tiles

torch.manual_seed(0)
assert tiles(12288)[2] == 8 and tiles(4096)[2] == 4  # rows of several tiles get 8 warps (call 95)
for n, k, block_k in [(34, 12288, 4096), (34, 6144, 4096), (18, 1000, None), (10, 3000, 1024), (6, 2048, None)]:
    x, w = torch.randn(1, k), torch.randn(n, k) * 0.05
    ref = x.double() @ w.double().T
    err = (gemv(x, w, block_k=block_k).double() - ref).abs().max() / ref.abs().max()
    assert err < 1e-5, (n, k, block_k, float(err))
    for swiglu in (False, True):
        res, nw = torch.randn(1, k), 1 + 0.1 * torch.randn(k)
        y, res_out = norm_gemv(x, res, nw, 1e-6, w, swiglu=swiglu, block_k=block_k)
        h = (x + res).double()
        ref = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * nw.double()) @ w.double().T
        if swiglu:
            gate, up = ref.chunk(2, -1)
            ref = torch.nn.functional.silu(gate) * up
        err = (y.double() - ref).abs().max() / ref.abs().max()
        assert err < 1e-5 and torch.equal(res_out, x + res), (n, k, block_k, swiglu, float(err))
for n, k, block_k in [(34, 1024, None), (18, 3000, 1024)]:  # a norm folded into the next weight (sum_sq)
    x, w, r, ss = torch.randn(1, k), torch.randn(n, k) * 0.05, torch.randn(1, n), torch.zeros(1)
    y = gemv(x, w, add=(r, ss), block_k=block_k)  # the residual added, its squares summed
    assert (y.double() - (x.double() @ w.double().T + r)).abs().max() < 1e-4
    assert abs(ss.item() - float(y.double().pow(2).sum())) < 1e-5 * ss.item()
    g, w2 = 1 + 0.1 * torch.randn(n), torch.randn(16, n) * 0.1
    yd = y.double()
    ref = (yd * torch.rsqrt(yd.pow(2).mean() + 1e-6) * g.double()) @ w2.double().T
    gate, up = ref.chunk(2, -1)
    for got, want in ((gemv(y, w2 * g, norm=(ss, 1e-6)), ref),
                      (norm_gemv(y, None, None, 1e-6, w2 * g, swiglu=True, sum_sq=ss)[0],
                       torch.nn.functional.silu(gate) * up)):
        assert (got.double() - want).abs().max() / want.abs().max() < 1e-5
print("ok")
"""


@pytest.mark.slow
def test_one_tile_and_several_tile_rows_match_float64():
    assert run_interpreted(CHECK) == "ok"
