"""Time the Triton paged-decode kernel at the bench's shape (Qwen3-0.6B: Hq 16, Hkv 8, D 128, bf16,
block 256) for several launch configurations; prints achieved bandwidth next to the 4.3 TB/s copy rate.
Bytes counted = K and V of every context token, read once (the kernel's floor).

    PYTHONPATH=. python3 scripts/bench_decode_kernel.py   # from the repository root, on a CUDA GPU;
                                                          # KERNEL_SWEEP=1 bash scripts/bench_one_gpu.sh runs it too
"""

import itertools

import torch
import triton.testing

from engine.layers.paged_decode import paged_decode_attention

B, Hq, Hkv, D, BS = 256, 16, 8, 128, 256
for ctx in (512, 1024, 2048):
    nb = (ctx + BS - 1) // BS
    kc = torch.randn(B * nb + 1, BS, Hkv, D, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    tables = torch.randperm(B * nb, device="cuda", dtype=torch.int32)[:B * nb].view(B, nb)
    lens = torch.full((B,), ctx, dtype=torch.int32, device="cuda")
    q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16)
    k_new, v_new = torch.randn(2, B, Hkv, D, device="cuda", dtype=torch.bfloat16)
    slots = (tables[:, -1].long() * BS + (ctx - 1) % BS).contiguous()
    nbytes = 2 * B * ctx * Hkv * D * 2
    for block_n, warps, stages in itertools.product((32, 64, 128), (2, 4, 8), (2, 3, 4)):
        try:
            def step():
                return paged_decode_attention(q, k_new, v_new, kc, vc, slots, tables, lens, D ** -0.5, block_n,
                                              warps, stages)

            ms = triton.testing.do_bench(step, warmup=20, rep=100)
        except Exception as e:  # a configuration that does not compile (shared memory) is skipped
            print(f"ctx {ctx} block_n {block_n} warps {warps} stages {stages}: {type(e).__name__}")
            continue
        print(f"ctx {ctx:5d} block_n {block_n:3d} warps {warps} stages {stages}: {ms * 1e3:8.1f} us "
              f"{nbytes / ms / 1e9:7.2f} TB/s ({nbytes / ms / 1e9 / 4.3:.0%} of 4.3 TB/s)")
