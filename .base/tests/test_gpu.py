"""The CUDA path against references (skipped where there is no GPU; run on the H200 machine)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import hf_greedy, prompts_of_lengths

from backends import available
from engine import LLM, SamplingParams
from engine.sequence import Sequence
from engine.step_batch import StepBatch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("block_size, group", [(16, 2), (256, 2), (64, 4)])
@pytest.mark.parametrize("preload", [True, False])
def test_paged_decode_kernel_matches_sdpa(block_size, group, preload, monkeypatch):
    """preload: the first K/V tile loaded before the rest (few programs) or in the loop (many)."""
    from engine.layers import decode_splits
    from engine.layers.attention import gather_context
    from engine.layers.paged_decode import paged_decode_attention

    monkeypatch.setattr(decode_splits, "PROGRAMS_PER_SM", 4 if preload else 0)

    torch.manual_seed(block_size)
    Hkv, D, B = 4, 128, 7
    lens = torch.tensor([1, 2, 63, 64, 65, 700, 1500], dtype=torch.int32)
    nblocks = [(int(n) + block_size - 1) // block_size for n in lens]
    total = sum(nblocks) + 3
    kc = torch.randn(total, block_size, Hkv, D, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    perm = torch.randperm(total).tolist()
    tables = torch.zeros(B, max(nblocks), dtype=torch.int32)
    for b, n in enumerate(nblocks):
        tables[b, :n] = torch.tensor(perm[:n])
        perm = perm[n:]
    last = lens.long() - 1  # the new token's position: the kernel stores it at its slot
    slots = (tables[torch.arange(B), last // block_size].long() * block_size + last % block_size).cuda()
    q = torch.randn(B, Hkv * group, D, device="cuda", dtype=torch.bfloat16)
    k_new = torch.randn(B, Hkv, D, device="cuda", dtype=torch.bfloat16)
    qkv = torch.randn(B, Hkv * (group + 2) * D, device="cuda", dtype=torch.bfloat16)
    v_new = qkv[:, -Hkv * D:].view(B, Hkv, D)  # a strided view, as the model passes v
    out = paged_decode_attention(q, k_new, v_new, kc, vc, slots, tables.cuda(), lens.cuda(), D ** -0.5)
    assert torch.equal(kc.view(-1, Hkv, D)[slots], k_new) and torch.equal(vc.view(-1, Hkv, D)[slots], v_new)
    for b in range(B):
        k = gather_context(kc.float(), tables[b:b + 1].long().cuda(), int(lens[b]))
        v = gather_context(vc.float(), tables[b:b + 1].long().cuda(), int(lens[b]))
        ref = F.scaled_dot_product_attention(q[b:b + 1].float().unsqueeze(2), k, v, scale=D ** -0.5, enable_gqa=True)
        err = (out[b].float() - ref[0, :, 0]).norm() / ref.norm()
        assert err < 1e-2, f"sequence {b} (context {int(lens[b])}): relative error {err:.2e}"


def sample_triton(logits, t, seed):
    from engine.layers.sampler import sample

    return sample(logits, 0, logits.shape[1], t, torch.tensor([seed], device="cuda"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gemv_matches_float64(dtype):
    """The batch-1 matmul kernel on odd and model shapes, into a strided ``out`` (the symmetric buffer's
    row-parallel path) and from a strided x; and what ``linear`` dispatches to it."""
    from engine.layers import gemm
    from engine.layers.gemv import gemv

    torch.manual_seed(0)
    for n, k in [(1, 16), (100, 257), (2048, 1024), (1024, 1536), (1024, 3072), (6144, 4096), (20003, 1024),
                 (4096, 12288), (4096, 6144)]:
        w = torch.randn(n, k, device="cuda", dtype=dtype)
        x = torch.randn(1, k + 3, device="cuda", dtype=dtype)[:, 3:]
        ref = x.double() @ w.double().T
        out = torch.full((1, n + 5), 7.0, device="cuda", dtype=dtype)
        got = gemv(x, w, out=out[:, :n])
        assert got.data_ptr() == out.data_ptr() and torch.all(out[:, n:] == 7.0)
        # float32: summation order only; bf16: the output's rounding (8 bits of mantissa)
        tol = (1e-5 if dtype == torch.float32 else 8e-3) * ref.abs().max().item()
        err = (got.double() - ref).abs().max().item()
        assert err <= tol, f"[1, {k}] x [{n}, {k}]^T {dtype}: max error {err:.3g} > {tol:.3g}"
    cuda = dict(device="cuda")
    assert gemm.set_gemm("auto", torch.device("cuda")) == "triton"
    try:
        calls = []
        gemm._gemv = lambda x, w, out=None: calls.append(tuple(w.shape)) or gemv(x, w, out=out)
        w = torch.randn(64, 1024, device="cuda")
        for x, w_ in [(torch.randn(1, 1024, **cuda), w), (torch.randn(2, 1024, **cuda), w),
                      (torch.randn(1, 64, **cuda), w.T)]:  # the last: no unit stride along K, so cuBLAS
            torch.testing.assert_close(gemm.linear(x, w_), x @ w_.T, rtol=1e-5, atol=1e-4)
        assert calls == [(64, 1024)], calls  # batch 1 and a weight the GEMV takes, only
    finally:
        gemm.set_gemm("auto", torch.device("cpu"))


def test_sampling_kernel_is_greedy_at_zero_and_draws_from_softmax():
    torch.manual_seed(0)
    logits = (torch.randn(6, 151936, device="cuda") * 3).to(torch.bfloat16)
    t = torch.tensor([0.0, 0.6, 0.0, 1.0, 0.0, 2.0], device="cuda")
    out = sample_triton(logits, t, seed=7)
    greedy = logits.float().argmax(dim=1)
    assert out[[0, 2, 4]].tolist() == greedy[[0, 2, 4]].tolist()
    small = torch.tensor([0.0, 1.0, 2.0, -1.0, 0.5, 0.0, 3.0, -2.0], device="cuda").repeat(20000, 1)
    for temp in (0.6, 1.0):
        draws = torch.cat([sample_triton(small, torch.full((20000,), temp, device="cuda"), seed=s) for s in range(5)])
        freq = torch.bincount(draws, minlength=8).float() / draws.numel()
        want = torch.softmax(small[0] / temp, dim=0)
        assert (freq - want).abs().max() < 0.01, (temp, freq.tolist(), want.tolist())


def test_sampling_kernel_shards_draw_what_the_whole_row_draws():
    """The noise of a column depends on its global index only: shards of the vocabulary (tp=2, 4 and 8
    splits of Qwen3's 151,936, none aligned to the kernel's blocks) and other chunk sizes pick the same
    winners as the whole row."""
    from engine.layers.sampler import unpack
    from engine.layers.sampling_kernel import sample_shard_triton

    torch.manual_seed(1)
    V = 151936
    logits = (torch.randn(5, V, device="cuda") * 3).to(torch.bfloat16)
    t = torch.tensor([0.0, 0.6, 1.0, 0.0, 1.5], device="cuda")
    seed = torch.tensor([99], device="cuda")
    whole = sample_shard_triton(logits, t, seed, 0, V, packed=False)
    assert whole.tolist() == unpack(sample_shard_triton(logits, t, seed, 0, V, packed=True)).tolist()
    for tp in (2, 4, 8):
        shard = V // tp
        best = torch.stack([sample_shard_triton(logits[:, r * shard:(r + 1) * shard].contiguous(), t, seed,
                                                r * shard, V, packed=True) for r in range(tp)]).amax(0)
        assert unpack(best).tolist() == whole.tolist(), tp
    row = logits[1:2]  # batch 1 runs chunks of 1,024 columns, batch 64 of 8,192: the same draw for row 0
    one = sample_shard_triton(row, t[1:2], seed, 0, V, packed=False)
    many = sample_shard_triton(row.repeat(64, 1), t[1:2].repeat(64), seed, 0, V, packed=False)
    assert one.tolist() == many[:1].tolist()


def test_best_chunk_kernel_orders_as_pack():
    """The chunks' reduction keeps what ``pack(...).amax`` keeps: the highest score, ties (also -0.0 against
    0.0, and rows of -inf) to the order of the packed pairs."""
    import triton

    from engine.layers.sampler import pack, unpack
    from engine.layers.sampling_kernel import _best_chunk_kernel

    torch.manual_seed(2)
    B, C = 6, 19
    best = torch.randn(B, C, device="cuda").round()  # many equal scores
    best[1] = float("-inf")
    best[2, :] = 0.0
    best[2, ::2] = -0.0
    best[3, 5] = float("inf")
    cols = torch.randperm(B * C, device="cuda", dtype=torch.int32).view(B, C)
    want = pack(best, cols).amax(1)
    for packed in (True, False):
        out = torch.empty(B, dtype=torch.int64, device="cuda")
        _best_chunk_kernel[(B,)](best, cols, out, C, PACKED=packed, BLOCK_C=triton.next_power_of_2(C), num_warps=1)
        assert out.tolist() == (want if packed else unpack(want)).tolist(), packed


@pytest.mark.parametrize("group", [1, 2, 4])
def test_varlen_prefill_matches_per_sequence_sdpa(group):
    from engine.layers.attention import varlen_causal

    varlen = varlen_causal()
    assert varlen is not None, "torch.nn.attention.varlen is missing: prefill falls back to per-sequence SDPA"
    torch.manual_seed(group)
    Hkv, D, lens = 2, 128, [1, 5, 64, 300, 1023]
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    q = torch.randn(sum(lens), Hkv * group, D, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn(2, sum(lens), Hkv, D, device="cuda", dtype=torch.bfloat16)
    out = varlen(q, k, v, cu, max(lens), D ** -0.5)
    for b, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        ref = F.scaled_dot_product_attention(*(t[s:e].float().transpose(0, 1) for t in (q, k, v)), is_causal=True,
                                             scale=D ** -0.5, enable_gqa=True).transpose(0, 1)
        err = (out[s:e].float() - ref).norm() / ref.norm()
        assert err < 1e-2, f"sequence {b} (length {lens[b]}): relative error {err:.2e}"


@pytest.mark.parametrize("enforce_eager", [True, False])
def test_cuda_float32_greedy_matches_transformers(tiny_untied, enforce_eager):
    prompts = prompts_of_lengths([3, 17, 40, 90])
    want = hf_greedy(tiny_untied, prompts, 24)
    with LLM(tiny_untied, device="cuda", dtype="float32", kvcache_block_size=16, max_model_len=256, max_num_seqs=8,
             max_num_batched_tokens=512, gpu_memory_utilization=0.3, enforce_eager=enforce_eager) as llm:
        got = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))
    assert [o["token_ids"] for o in got] == want


def engine_logits(llm: LLM, prompts: list[list[int]], next_tokens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of the last prompt position (prefill) and, after appending ``next_tokens``, of one decode step."""
    seqs = [Sequence(p, SamplingParams(temperature=0, max_tokens=4), llm.config.kvcache_block_size) for p in prompts]
    for s in seqs:
        llm.block_manager.allocate(s)
    prefill = llm.call("logits", StepBatch.from_sequences(seqs, True).to_bytes())
    for s, t in zip(seqs, next_tokens):
        s.token_ids.append(t)
        llm.block_manager.may_append(s)
    decode = llm.call("logits", StepBatch.from_sequences(seqs, False).to_bytes())
    for s in seqs:
        llm.block_manager.deallocate(s)
    return prefill, decode


@pytest.fixture(scope="module")
def tiny_realistic(model_cache) -> str:
    """Ordinary initial weights (std 0.02, as real checkpoints are trained from): bf16 is judged on the
    activations it meets in practice, not on the huge ones of the correctness fixtures."""
    from helpers import TINY

    from harness.checkpoint import materialize

    return materialize("tiny-realistic", {**TINY, "initializer_range": 0.02, "head_dim": 128}, seed=5, root=model_cache)


def test_bf16_logits_agree_with_transformers_float32(tiny_realistic):
    from transformers import Qwen3ForCausalLM

    tiny_untied = tiny_realistic
    prompts = prompts_of_lengths([5, 33, 120], seed=4)
    next_tokens = [7, 100, 999]
    hf = Qwen3ForCausalLM.from_pretrained(tiny_untied, dtype=torch.float32).cuda().eval()
    with torch.no_grad():
        ref_prefill = torch.stack([hf(torch.tensor([p]).cuda()).logits[0, -1] for p in prompts])
        ref_decode = torch.stack([hf(torch.tensor([p + [t]]).cuda()).logits[0, -1]
                                  for p, t in zip(prompts, next_tokens)])
    with LLM(tiny_untied, device="cuda", dtype="bfloat16", kvcache_block_size=16, max_model_len=256, max_num_seqs=8,
             max_num_batched_tokens=512, gpu_memory_utilization=0.3) as llm:
        prefill, decode = engine_logits(llm, prompts, next_tokens)
    for name, got, ref in (("prefill", prefill, ref_prefill), ("decode", decode, ref_decode)):
        err = ((got.float() - ref).norm(dim=-1) / ref.norm(dim=-1)).max().item()
        assert err <= 1e-2, f"{name}: relative error {err:.2e}"


multi_gpu = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs several GPUs")


@pytest.fixture(scope="module")
def tiny_kv8(model_cache) -> str:
    from helpers import TINY

    from harness.checkpoint import materialize

    return materialize("tiny-kv8", {**TINY, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 16},
                       seed=3, root=model_cache)


def generate_tokens(path, tp, params, prompts, **options):
    defaults = dict(device="cuda", dtype="float32", kvcache_block_size=16, max_model_len=256,
                    max_num_batched_tokens=512, max_num_seqs=8, gpu_memory_utilization=0.3)
    with LLM(path, tensor_parallel_size=tp, **{**defaults, **options}) as llm:
        used = llm.runner.all_reduce
        return [o["token_ids"] for o in llm.generate(prompts, params)], used


def fresh_tokens(path, tp, prompts, **options):
    """(tokens, all-reduce used) of an engine in a fresh process: symmetric memory is set up once per
    process, so only a first engine uses it."""
    import json
    import subprocess
    import sys

    args = dict(model=path, tensor_parallel_size=tp, device="cuda", dtype="float32", kvcache_block_size=16,
                max_model_len=256, max_num_batched_tokens=512, max_num_seqs=8, gpu_memory_utilization=0.3, **options)
    proc = subprocess.run([sys.executable, "tests/fresh_generate.py", json.dumps(args), json.dumps(prompts)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["tokens"], out["all_reduce"]


@multi_gpu
def test_symm_mem_all_reduce_equals_nccl_exactly():
    """scripts/all_reduce_sizes.py --check: every decode and prefill shape, one-shot, two-shot and the
    row-parallel matmul path, equal to NCCL bit for bit in float32 on two GPUs."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
                           "scripts/all_reduce_sizes.py", "--check"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "equals NCCL exactly" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]


@multi_gpu
def test_multi_gpu_float32_greedy_equals_tp1(tiny_kv8):
    """tp=2 (4, 8 where there are GPUs) with symmetric memory, each engine in a process of its own, gives
    tp=1's greedy tokens."""
    prompts = prompts_of_lengths([3, 40, 90], seed=11)
    outs = {}
    for tp in [t for t in (1, 2, 4, 8) if t <= torch.cuda.device_count()]:
        outs[tp], used = fresh_tokens(tiny_kv8, tp, prompts)
        assert used == ("none" if tp == 1 else "symm_mem"), used
    assert all(v == outs[1] for v in outs.values()), {tp: v[0][:8] for tp, v in outs.items()}


@multi_gpu
@pytest.mark.parametrize("control", available())
def test_tp2_float32_greedy_equals_transformers_under_every_control_plane(tiny_untied, control):
    """tp=2 greedy tokens equal transformers' under every plane; under shm also with CUDA graphs off and
    with NCCL's all-reduce (the data plane does not depend on the control plane)."""
    prompts = prompts_of_lengths([3, 17, 40, 90])
    want = hf_greedy(tiny_untied, prompts, 24)
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    variants = [{}] + ([dict(enforce_eager=True), dict(all_reduce="nccl")] if control == "shm" else [])
    for options in variants:
        got, used = generate_tokens(tiny_untied, 2, params, prompts, control=control, **options)
        assert got == want, (control, options)
        # symmetric memory only for the first engine of a process (layers/all_reduce.py), NCCL after
        assert used in ((options["all_reduce"],) if "all_reduce" in options else ("symm_mem", "nccl"))


@multi_gpu
def test_seeded_sampling_is_the_same_at_tp1_and_tp2(tiny_untied):
    prompts = prompts_of_lengths([5, 12, 30], seed=6)
    tp1, _ = fresh_tokens(tiny_untied, 1, prompts, seed=5, temperature=0.8)
    tp2, used = fresh_tokens(tiny_untied, 2, prompts, seed=5, temperature=0.8)
    assert used == "symm_mem" and tp1 == tp2


def prefill_caches_and_tokens(llm: LLM, batch: StepBatch) -> tuple[list[int], torch.Tensor]:
    """Run the prefill ``batch`` on rank 0's runner; returns (its sampled tokens, the last layer's K cache)."""
    runner = llm.runner
    for attn in runner.model.attention_layers():
        attn.k_cache.zero_()
        attn.v_cache.zero_()
    tokens = runner.run(batch.to_bytes()).tolist()
    return tokens, runner.model.attention_layers()[-1].k_cache.clone()


@pytest.mark.parametrize("lens", [[32], [5, 11, 20], [16, 16, 16, 16, 16, 16, 16, 16]])
def test_graphed_prefill_equals_the_eager_one(tiny_realistic, lens):
    """bf16 (the prefill graphs need 16-bit weights): a prompt that fills its bucket gives the eager prefill's
    tokens and K cache bit for bit; a padded one (36 tokens in the 64 bucket) its tokens and its K cache
    within bf16 rounding (the GEMMs see 64 rows, not 36), and nothing outside its slots."""
    prompts = prompts_of_lengths(lens, seed=6)
    with LLM(tiny_realistic, device="cuda", dtype="bfloat16", kvcache_block_size=16, max_model_len=256,
             max_num_seqs=8, max_num_batched_tokens=512, gpu_memory_utilization=0.3) as llm:
        graphs = llm.runner.prefill_graphs
        assert graphs is not None
        seqs = [Sequence(p, SamplingParams(temperature=0, max_tokens=4), 16) for p in prompts]
        for s in seqs:
            llm.block_manager.allocate(s)
        batch = StepBatch.from_sequences(seqs, True)
        assert graphs.can_run(batch)
        graphed = prefill_caches_and_tokens(llm, batch)
        llm.runner.prefill_graphs = None
        eager = prefill_caches_and_tokens(llm, batch)
        llm.runner.prefill_graphs = graphs
    graphed_k, eager_k = graphed[1][:-1], eager[1][:-1]  # the last block is the trash, where padding writes
    assert graphed[0] == eager[0]
    if sum(lens) in graphs.buckets:
        assert torch.equal(graphed_k, eager_k)
    else:
        torch.testing.assert_close(graphed_k, eager_k, rtol=2e-2, atol=2e-2)
    assert not graphed_k[eager_k == 0].any()  # nothing outside the prompts' slots
