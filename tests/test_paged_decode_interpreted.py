"""Split-KV decode attention (``engine/layers/paged_decode.py``) run by Triton's interpreter on the CPU
(``TRITON_INTERPRET=1``, in a fresh process): the first tile loaded early or in the loop (batch 1 only by default,
call 101), one split and several (with the merge), Qwen3's q/k norm and RoPE in the kernel or not, against SDPA
over the gathered context in float64."""

from __future__ import annotations

import pytest
from helpers import run_interpreted

pytest.importorskip("triton")

CHECK = r"""
import torch
import torch.nn.functional as F
from engine.layers.attention import gather_context
from engine.layers.fusion import qk_norm_rotary
from engine.layers.paged_decode import paged_decode_attention

torch.manual_seed(0)
Hkv, group, D = 2, 2, 128
cases = [([1, 40, 100], 1, False, False, 16), ([1, 40, 100], 3, True, True, 16), ([130], 4, None, True, 16),
         ([70, 3], 2, None, False, 16), ([100], 1, None, True, 256)]
for lens, splits, preload, qk, bs in cases:  # bs 256: the engine's launch (batch 1, one split: a 128-token tile)
    B = len(lens)
    nblocks = [-(-n // bs) for n in lens]
    kc = torch.randn(sum(nblocks) + 1, bs, Hkv, D)
    vc = torch.randn_like(kc)
    tables = torch.zeros(B, max(nblocks), dtype=torch.int32)
    perm = torch.randperm(sum(nblocks)).tolist()
    for b, n in enumerate(nblocks):
        tables[b, :n] = torch.tensor(perm[:n])
        perm = perm[n:]
    ctx = torch.tensor(lens, dtype=torch.int32)
    last = ctx.long() - 1
    slots = tables[torch.arange(B), last // bs].long() * bs + last % bs
    q, k_new, v_new = torch.randn(B, Hkv * group, D), torch.randn(B, Hkv, D), torch.randn(B, Hkv, D)
    qk_norm = (1 + 0.1 * torch.randn(D), 1 + 0.1 * torch.randn(D), 1e-6, *torch.randn(2, B, D)) if qk else None
    out = paged_decode_attention(q, k_new, v_new, kc, vc, slots, tables, ctx, D ** -0.5,
                                 block_n=16 if bs == 16 else None, num_splits=splits, qk_norm=qk_norm, preload=preload)
    if qk:  # the kernel normalised and rotated q and the new k (stored so) first
        q, k_new = qk_norm_rotary(q, k_new, *qk_norm)
    stored_k, stored_v = kc.view(-1, Hkv, D)[slots], vc.view(-1, Hkv, D)[slots]
    assert torch.allclose(stored_k, k_new, atol=1e-5) and torch.equal(stored_v, v_new)
    for b in range(B):
        k, v = (gather_context(c.double(), tables[b:b + 1].long(), lens[b]) for c in (kc, vc))
        ref = F.scaled_dot_product_attention(q[b:b + 1].double().unsqueeze(2), k, v, scale=D ** -0.5,
                                             enable_gqa=True)[0, :, 0]
        err = float((out[b].double() - ref).abs().max())
        assert err < 1e-4, (lens, splits, preload, qk, b, err)
print("ok")
"""


@pytest.mark.slow
def test_split_and_early_load_paths_match_sdpa():
    assert run_interpreted(CHECK) == "ok"
