"""The batch-1 and small-batch decode kernels (issue 27) against the unfused path (skipped without a GPU):
split-KV decode attention with q/k norm and RoPE inside it, RMSNorm fused into the GEMV after it, and the
engine's greedy tokens through them (batch 1, contexts split over several programs) against transformers'."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import hf_greedy, prompts_of_lengths

from engine import LLM, SamplingParams

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
ATTN_TOL = {torch.float32: 2e-3, torch.bfloat16: 1e-2}  # tl.dot rounds float32 inputs to TF32 (10-bit mantissa)


def paged_case(dtype, lens, Hkv=8, group=2, D=128, block_size=256):
    """Caches with randomly placed blocks, the new token's q/k/v as strided views of one qkv row, and the
    tables and slots of ``lens`` (context lengths, the new token included)."""
    torch.manual_seed(len(lens))
    B = len(lens)
    nblocks = [(n + block_size - 1) // block_size for n in lens]
    total = sum(nblocks) + 2
    kc = torch.randn(total, block_size, Hkv, D, device="cuda", dtype=dtype)
    vc = torch.randn_like(kc)
    perm = torch.randperm(total).tolist()
    tables = torch.zeros(B, max(nblocks), dtype=torch.int32)
    for b, n in enumerate(nblocks):
        tables[b, :n], perm = torch.tensor(perm[:n]), perm[n:]
    last = torch.tensor(lens) - 1
    slots = (tables[torch.arange(B), last // block_size].long() * block_size + last % block_size).cuda()
    qkv = torch.randn(B, Hkv * (group + 2) * D, device="cuda", dtype=dtype)
    q, k, v = qkv.split([Hkv * group * D, Hkv * D, Hkv * D], dim=-1)
    return (q.view(B, -1, D), k.view(B, Hkv, D), v.view(B, Hkv, D), kc, vc, slots, tables.cuda(),
            torch.tensor(lens, dtype=torch.int32, device="cuda"))


@pytest.mark.parametrize("hidden", [1024, 1000, 4096])
@pytest.mark.parametrize("shard", [(0, 300), (100, 200)])  # the whole table (tp=1) and a middle shard
def test_embed_kernel_resolves_placeholders_and_masks_the_shard(hidden, shard):
    """The Triton lookup equals ``resolve_placeholders`` then the torch shard lookup, rows outside the shard 0."""
    from engine.layers.embed_head import resolve_placeholders
    from engine.layers.embed_kernel import embed

    torch.manual_seed(hidden)
    start, end = shard
    table = torch.randn(300, hidden, device="cuda", dtype=torch.bfloat16)
    previous = torch.tensor([7, 150, 299], device="cuda")
    ids = torch.tensor([5, -1, 120, -3, -2, 250, 0], device="cuda")
    want = F.embedding(resolve_placeholders(ids, previous), table)
    resolved = resolve_placeholders(ids, previous)
    want[(resolved < start) | (resolved >= end)] = 0
    assert torch.equal(embed(ids, previous, table[start:end].contiguous(), start), want)
    assert torch.equal(embed(ids[ids >= 0], None, table, 0), F.embedding(ids[ids >= 0], table))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_splits", [1, 3, 64])
@pytest.mark.parametrize("with_norm", [False, True])
@pytest.mark.parametrize("group", [2, 4])  # Qwen3-0.6B's and 8B's query heads per KV head (4: 4 warps when split)
def test_split_decode_with_qk_norm_matches_the_unfused_path(dtype, num_splits, with_norm, group):
    check_decode(dtype, [1, 2, 65, 700, 4100], num_splits, with_norm, group)


@pytest.mark.parametrize("n", [1, 65, 100, 129, 300])  # 300: one split past its 128-token tile walks a second
@pytest.mark.parametrize("group", [2, 4])  # 4: the 64-token tile (decode_splits.WIDE_MAX_GROUP)
def test_batch_1_one_split_takes_the_wide_tile(n, group):
    """Batch 1, one split, the engine's launch: at group 2 ``decode_splits.launch``'s 128-token tile at 8 warps, loaded
    before the PDL wait; at group 4 64-token tiles."""
    check_decode(torch.bfloat16, [n], 1, True, group)


def check_decode(dtype, lens, num_splits, with_norm, group):
    """paged_decode_attention (the engine's launch) against SDPA over the gathered context, the new K/V stored."""
    from engine.layers.attention import gather_context
    from engine.layers.fusion import RotaryEmbedding, qk_norm_rotary
    from engine.layers.paged_decode import paged_decode_attention

    q, k, v, kc, vc, slots, tables, ctx = paged_case(dtype, lens, group=group)
    D = q.shape[-1]
    cos, sin = RotaryEmbedding(D, 8192, 1e6).cuda()(ctx.long() - 1)
    qw, kw = (1 + 0.1 * torch.randn(2, D, device="cuda")).to(dtype)
    qk_norm = (qw, kw, 1e-6, cos, sin) if with_norm else None
    q_ref, k_ref = qk_norm_rotary(q, k, qw, kw, 1e-6, cos, sin) if with_norm else (q, k)
    out = paged_decode_attention(q, k, v, kc, vc, slots, tables, ctx, D ** -0.5, num_splits=num_splits,
                                 qk_norm=qk_norm)
    stored_k = kc.view(-1, *k.shape[1:])[slots]
    torch.testing.assert_close(stored_k, k_ref, rtol=TOL[dtype], atol=TOL[dtype])  # RoPE rounds once in-kernel
    assert torch.equal(vc.view(-1, *v.shape[1:])[slots], v)
    for b, n in enumerate(lens):
        kk = gather_context(kc.float(), tables[b:b + 1].long(), n)
        vv = gather_context(vc.float(), tables[b:b + 1].long(), n)
        ref = F.scaled_dot_product_attention(q_ref[b:b + 1].float().unsqueeze(2), kk, vv, scale=D ** -0.5,
                                             enable_gqa=True)
        err = (out[b].float() - ref[0, :, 0]).norm() / ref.norm()
        assert err < ATTN_TOL[dtype], f"context {n}, {num_splits} splits: relative error {err:.2e}"


@pytest.mark.parametrize("num_splits", [1, 3])
def test_decode_order_changes_no_bit(num_splits, monkeypatch):
    """Programs started longest context first (``order``) compute exactly what the batch order computes."""
    from engine.layers import decode_splits
    from engine.layers.paged_decode import paged_decode_attention
    from engine.step_inputs import longest_first

    monkeypatch.setattr(decode_splits, "PROGRAMS_PER_SM", 0)  # more than one wave: the order is used

    lens = [65, 4100, 1, 700, 2, 700]
    q, k, v, kc, vc, slots, tables, ctx = paged_case(torch.bfloat16, lens)
    order = torch.from_numpy(longest_first(ctx.cpu().numpy())).int().cuda()
    args = (q, k, v, kc, vc, slots, tables, ctx, q.shape[-1] ** -0.5)
    plain = paged_decode_attention(*args, num_splits=num_splits)
    assert torch.equal(paged_decode_attention(*args, num_splits=num_splits, order=order), plain)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("k, n, swiglu", [(1000, 72, False), (1000, 72, True), (1024, 4096, False),
                                          (1024, 6144, True), (4096, 6144, False), (4096, 24576, True)])
@pytest.mark.parametrize("with_residual", [False, True])
def test_norm_gemv_matches_the_unfused_path(dtype, k, n, swiglu, with_residual):
    """Qwen3-0.6B's and 8B's QKV and gate/up at tp=1, and an odd shape; the residual out is exact."""
    from engine.layers.fusion import add_rms_norm, rms_norm, silu_and_mul
    from engine.layers.gemv import norm_gemv

    torch.manual_seed(k + n)
    cuda = dict(device="cuda", dtype=dtype)
    h, res = torch.randn(2, 1, k, **cuda)
    norm_w = (1 + 0.1 * torch.randn(k, device="cuda")).to(dtype)
    w = (torch.randn(n, k, device="cuda") / k ** 0.5).to(dtype)
    x, new_res = add_rms_norm(h, res, norm_w, 1e-6) if with_residual else (rms_norm(h, norm_w, 1e-6), h)
    want = (x.double() @ w.double().T).to(dtype)
    want = silu_and_mul(want) if swiglu else want
    got, got_res = norm_gemv(h, res if with_residual else None, norm_w, 1e-6, w, swiglu)
    assert torch.equal(got_res, new_res)
    err = (got.float() - want.float()).norm() / want.float().norm()
    assert err < TOL[dtype], f"relative error {err:.2e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_residual", [False, True])
def test_long_rows_norm_then_gemv_match_the_unfused_path(dtype, with_residual):
    """Qwen3-8B's rows (K = 4,096, past NORM_GEMV_MAX_K): the Triton norm equals the torch one (the residual
    bit for bit, the normalised row within one rounding), and the GEMV with SwiGLU and no norm matches
    matmul then SiLU-and-mul."""
    from engine.layers.fusion import add_rms_norm, rms_norm, silu_and_mul
    from engine.layers.gemv import add_rms_norm as triton_norm
    from engine.layers.gemv import norm_gemv

    torch.manual_seed(4)
    k, n = 4096, 2 * 12288
    cuda = dict(device="cuda", dtype=dtype)
    h, res = torch.randn(2, 1, k, **cuda)
    norm_w = (1 + 0.1 * torch.randn(k, device="cuda")).to(dtype)
    want, want_res = add_rms_norm(h, res, norm_w, 1e-6) if with_residual else (rms_norm(h, norm_w, 1e-6), h)
    got, got_res = triton_norm(h, res if with_residual else None, norm_w, 1e-6)
    assert torch.equal(got_res, want_res)
    assert (got.float() - want.float()).abs().max() <= 2 * torch.finfo(dtype).eps * want.float().abs().max()
    w = (torch.randn(n, k, device="cuda") / k ** 0.5).to(dtype)
    act, same = norm_gemv(got, None, None, 0.0, w, swiglu=True)
    ref = silu_and_mul((got.double() @ w.double().T).to(dtype))
    assert same is got and (act.float() - ref.float()).norm() / ref.float().norm() < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("k, n_qkv, inter", [(1024, 4096, 3072), (4096, 6144, 12288)])
def test_a_norm_folded_into_the_next_gemv_matches_the_unfused_path(dtype, k, n_qkv, inter):
    """Qwen3-0.6B's and 8B's rows: o_proj adds the residual and sums its squares (as unfused), then QKV
    (``gemv`` ``norm=``) and gate/up (``norm_gemv`` ``sum_sq=``), the norm's weight folded into theirs, against
    norm then matmul."""
    from engine.layers.fusion import rms_norm, silu_and_mul
    from engine.layers.gemv import gemv, norm_gemv

    torch.manual_seed(k)
    cuda = dict(device="cuda", dtype=dtype)
    attn, res = torch.randn(1, k, **cuda), torch.randn(1, k, **cuda)
    o_w = (torch.randn(k, k, device="cuda") / k ** 0.5).to(dtype)
    g = (1 + 0.1 * torch.randn(k, device="cuda")).to(dtype)
    qkv_w, gu_w = ((torch.randn(n, k, device="cuda") / k ** 0.5).to(dtype) for n in (n_qkv, 2 * inter))
    ss = torch.zeros(1, device="cuda")
    new_res = gemv(attn, o_w, add=(res, ss))
    assert torch.equal(new_res, gemv(attn, o_w) + res)
    torch.testing.assert_close(ss, new_res.float().pow(2).sum().reshape(1), rtol=1e-5, atol=0)
    x = rms_norm(new_res, g, 1e-6)
    fold = [(w.float() * g.float()).to(dtype) for w in (qkv_w, gu_w)]
    want_qkv = (x.double() @ qkv_w.double().T).to(dtype)
    want_act = silu_and_mul((x.double() @ gu_w.double().T).to(dtype))
    for got, want in ((gemv(new_res, fold[0], norm=(ss, 1e-6)), want_qkv),
                      (norm_gemv(new_res, None, None, 1e-6, fold[1], True, sum_sq=ss)[0], want_act)):
        err = (got.float() - want.float()).norm() / want.float().norm()
        assert err < TOL[dtype], f"relative error {err:.2e}"


@pytest.mark.parametrize("enforce_eager", [True, False])
@pytest.mark.parametrize("lengths", [[600], [600, 40], [20]])
def test_float32_greedy_through_the_fused_and_split_kernels(tiny_norms, enforce_eager, lengths):
    """Batch 1 takes the fused norm+GEMV kernels and, as its context grows, the split decode at each split
    count (and their CUDA graphs), with drawn norm weights (folded into the projections); the tokens
    equal transformers'."""
    prompts = prompts_of_lengths(lengths, seed=3)
    want = hf_greedy(tiny_norms, prompts, 16)
    with LLM(tiny_norms, device="cuda", dtype="float32", kvcache_block_size=16, max_model_len=1024,
             max_num_seqs=4, max_num_batched_tokens=1024, gpu_memory_utilization=0.3,
             enforce_eager=enforce_eager) as llm:
        got = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True))
    assert [o["token_ids"] for o in got] == want


def _batch_1_layers(norms: bool, dtype=torch.bfloat16):
    """8 batch-1 layers of Qwen3-0.6B's shapes: weights in ``dtype`` (QKV, o, gate/up, down, and with ``norms`` two
    norm rows), h0 ``[1, 1024]``, and ``attend(qkv) -> [1, 2048]`` (decode attention, one 300-token context)."""
    from engine.layers.paged_decode import paged_decode_attention

    q, k, v, kc, vc, slots, tables, ctx = paged_case(dtype, [300])
    hidden, inter, D = 1024, 3072, q.shape[-1]
    torch.manual_seed(0)
    shapes = [(4096, hidden), (hidden, 2048), (2 * inter, hidden), (hidden, inter)] + [(hidden,)] * (2 * norms)
    layers = [[(torch.randn(*s, device="cuda") / s[-1] ** 0.5).to(dtype) for s in shapes] for _ in range(8)]

    def attend(qkv):
        qq, kk, vv = qkv.view(1, -1, D).split([16, 8, 8], dim=1)
        return paged_decode_attention(qq, kk, vv, kc, vc, slots, tables, ctx, D ** -0.5, num_splits=4).view(1, -1)
    return layers, torch.randn(1, hidden, device="cuda", dtype=dtype), attend


def _graph_replays_under_pdl(stack, replays: int = 3):
    """Yields ``stack()``'s output in a CUDA graph captured with PDL on, after each of ``replays`` replays."""
    from engine.layers import pdl

    pdl.ENABLED = True
    try:
        stack()  # compile the PDL variants outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            got = stack()
        for _ in range(replays):
            graph.replay()
            torch.cuda.synchronize()
            yield got
    finally:
        pdl.ENABLED = False


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability()[0] < 9, reason="PDL: sm90+")
def test_pdl_chain_in_a_cuda_graph_equals_the_plain_launches():
    """A batch-1 layer stack (norm+GEMV, decode attention, GEMV, norm+gate/up+SwiGLU, GEMV; 8 layers, each
    reading the one before) launched with PDL in a CUDA graph gives bit for bit the plain launches' result:
    no kernel reads an activation before the kernel that writes it has finished."""
    from engine.layers.gemv import gemv, norm_gemv

    layers, h0, attend = _batch_1_layers(norms=True)

    def stack():
        h, res = h0, None
        for qkv_w, o_w, gu_w, down_w, n1, n2 in layers:
            qkv, res = norm_gemv(h, res, n1, 1e-6, qkv_w, block_k=1024)
            h = gemv(attend(qkv), o_w, block_k=1024)
            act, res = norm_gemv(h, res, n2, 1e-6, gu_w, swiglu=True, block_k=1024)
            h = gemv(act, down_w, block_k=2048)
        return h + res

    want = stack()
    for got in _graph_replays_under_pdl(stack):
        assert torch.equal(got, want)


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability()[0] < 9, reason="PDL: sm90+")
def test_pdl_chain_with_summed_norms_in_a_cuda_graph_matches_the_plain_launches():
    """The same stack as the engine runs it at tp=1 since session 42: o_proj and down_proj add the residual and sum
    its squares (float atomics), the next QKV and gate/up scale by 1 / rms, their norms folded. Under PDL in a CUDA
    graph a read of a sum before every program of the GEMV before had added to it would be off by a percent or more.
    In float32: in bfloat16 the atomics' order alone moves two plain runs 1.0-1.05% apart over 8 layers (call 113,
    results/h200/NOTES.md), where float32 moves them by ~1e-6."""
    from engine.layers.gemv import gemv, norm_gemv

    layers, h0, attend = _batch_1_layers(norms=False, dtype=torch.float32)

    def stack():
        sums, res = torch.zeros(len(layers), 2, device="cuda"), h0
        for i, (qkv_w, o_w, gu_w, down_w) in enumerate(layers):
            qkv = gemv(res, qkv_w, norm=(sums[i - 1, 1:2], 1e-6)) if i else gemv(res, qkv_w)
            res = gemv(attend(qkv), o_w, add=(res, sums[i, 0:1]))
            act = norm_gemv(res, None, None, 1e-6, gu_w, swiglu=True, sum_sq=sums[i, 0:1])[0]
            res = gemv(act, down_w, add=(res, sums[i, 1:2]))
        return res

    def off(a, b):
        return ((a.float() - b.float()).norm() / b.float().norm()).item()

    want = stack()
    assert off(stack(), want) < 1e-4
    for got in _graph_replays_under_pdl(stack):
        assert off(got, want) < 1e-4
