"""Time the Triton paged-decode kernel for several launch configurations, replayed in a CUDA graph as the
engine's decode steps are (without one, a short launch times Python's launch cost: ~113 us for any split
count at batch 1, call 35); prints achieved bandwidth next to the H200's 4.3 TB/s copy rate (on another GPU of
``harness/report.py``'s ``COPY_BANDWIDTH``, next to its own too). Bytes counted = K
and V of every context token, read once (the kernel's floor).

Shapes (``--shape``): ``0.6b`` (Hq 16, Hkv 8: Qwen3-0.6B at tp=1), ``0.6b-tp2`` (Hq 8, Hkv 4),
``8b-tp1`` (Hq 32, Hkv 8), ``8b-tp2`` (Hq 16, Hkv 4: one rank's heads at tp=2); D 128, bf16, KV block 256,
batch ``--batch`` (256; a comma-separated list runs each). Contexts: every sequence at 512, 1024 and 2048
tokens, ``mixed``: uniform in [300, 1224], the bench's spread of contexts after ~200 decode steps (prompts of
100-1024 tokens), and ``wide``: uniform in [100, 2048], the widest spread the bench reaches.

Options: ``--quick``: mixed contexts only, a smaller grid of launches. ``--default-only``: the engine's
launch alone; ``--launch 64,2,2``: that one (block_n, warps, stages). ``--contexts mixed,762``: the context
kinds (an integer: every sequence at that length). ``--longest-first``: the sequences sorted by context,
longest first (the programs start in that order). ``--order``: the batch unsorted, and the kernel's ``order``
argument starts its programs longest first, as the engine does. ``--qk-norm``: Qwen3's q/k norm and RoPE in the
kernel, the variant the engine compiles (more registers: ptxas gives it more spills, results/h200/NOTES.md,
session 40). ``--no-preload``: the first tile after the PDL wait at batch 1 too. ``--head-major``: the caches laid out
``[num_blocks, Hkv, block_size, D]`` and passed as the engine's ``[num_blocks, block_size, Hkv, D]`` view (the
kernel takes strides). Session 6 (results/h200/session6/) found neither order nor layout matters; the number of
programs and the tile do. ``--splits 1,auto``: split-KV at each count (``auto``: the engine's,
``decode_splits.num_splits``); at the bench's batch 256 splitting lost at every count (results/h200x2/, call 17).
The first tile loads before the PDL wait at batch 1 only, as in the engine (call 101); here attention follows
attention, so at batch > 1 the early load would overlap the kernel before, which in the engine is cuBLAS.

    PYTHONPATH=. python3 scripts/bench_decode_kernel.py [--shape 0.6b] [--batch 256] [--quick]
    # from the repository root, on a CUDA GPU; KERNEL_SWEEP=1 bash scripts/bench_one_gpu.sh runs it too
"""

import argparse
import inspect
import itertools

import torch
from gpu_only import require_cuda

if __name__ == "__main__":
    require_cuda()
import triton.testing  # noqa: E402

from common import OneLineParser
from engine.layers.decode_splits import launch, num_splits  # noqa: E402
from engine.layers.paged_decode import paged_decode_attention  # noqa: E402
from engine.layers.pdl import set_pdl  # noqa: E402
from harness.report import COPY_BANDWIDTH  # noqa: E402

DEFAULT_STAGES = inspect.signature(paged_decode_attention).parameters["num_stages"].default
SHAPES = {"0.6b": (16, 8), "0.6b-tp2": (8, 4), "8b-tp1": (32, 8), "8b-tp2": (16, 4)}
D, BS = 128, 256


def context_lens(kind, batch: int) -> torch.Tensor:
    if kind in ("mixed", "wide"):
        g = torch.Generator().manual_seed(0)
        low, high = (300, 1225) if kind == "mixed" else (100, 2049)
        return torch.randint(low, high, (batch,), generator=g, dtype=torch.int32)
    return torch.full((batch,), kind, dtype=torch.int32)


def parse_args() -> argparse.Namespace:
    ap = OneLineParser()
    ap.add_argument("--shape", default="0.6b", help=f"comma-separated, of {', '.join(SHAPES)}")
    ap.add_argument("--batch", default="256", help="comma-separated batch sizes")
    ap.add_argument("--quick", action="store_true", help="mixed contexts only, a smaller grid of tiles")
    ap.add_argument("--default-only", action="store_true", help="only the engine's launch")
    ap.add_argument("--launch", help="only this launch: block_n,warps,stages (e.g. 64,2,2)")
    ap.add_argument("--contexts", help="comma-separated context kinds: mixed or a length in tokens")
    ap.add_argument("--longest-first", action="store_true", help="sequences sorted by context, longest first")
    ap.add_argument("--order", action="store_true", help="programs started longest first by the kernel's order")
    ap.add_argument("--head-major", action="store_true", help="caches laid out [num_blocks, Hkv, block_size, D]")
    ap.add_argument("--pdl", action="store_true", help="launch with PDL, as the engine does on sm90+ (llm.pdl)")
    ap.add_argument("--no-preload", action="store_true", help="the first tile loaded after the PDL wait, also "
                    "at batch 1")
    ap.add_argument("--qk-norm", action="store_true", help="q/k RMSNorm and RoPE inside the kernel, as Qwen3's "
                    "layers run it (more registers: the variant the engine compiles)")
    ap.add_argument("--splits", default="1", help="splits per sequence, comma-separated: integers or auto "
                    "(the engine's choice, decode_splits.num_splits)")
    return ap.parse_args()


def main():
    args = parse_args()
    if args.pdl and not set_pdl(True, torch.device("cuda")):
        raise SystemExit("error: --pdl: this GPU or Triton cannot launch with PDL")
    kinds = (tuple(k if k in ("mixed", "wide") else int(k) for k in args.contexts.split(",")) if args.contexts
             else ("mixed",) if args.quick else (512, 1024, 2048, "mixed"))
    for shape, batch in itertools.product(args.shape.split(","), args.batch.split(",")):
        run(args, shape, int(batch), kinds)


def run(args: argparse.Namespace, shape: str, B: int, kinds: tuple) -> None:
    """Time every launch of ``args`` for one shape and batch size at each context kind."""
    Hq, Hkv = SHAPES[shape]
    for kind in kinds:
        lens = context_lens(kind, B)
        if args.longest_first:
            lens = lens.sort(descending=True).values
        nbs = (lens + BS - 1) // BS
        nb = int(nbs.max())
        if args.head_major:
            kc, vc = (torch.randn(B * nb + 1, Hkv, BS, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
                      for _ in range(2))
        else:
            kc = torch.randn(B * nb + 1, BS, Hkv, D, device="cuda", dtype=torch.bfloat16)
            vc = torch.randn_like(kc)
        tables = torch.randperm(B * nb, device="cuda", dtype=torch.int32).view(B, nb)
        lens = lens.cuda()
        q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16)
        k_new, v_new = torch.randn(2, B, Hkv, D, device="cuda", dtype=torch.bfloat16)
        last = torch.gather(tables, 1, ((lens.long() - 1) // BS)[:, None])[:, 0]
        slots = (last.long() * BS + (lens.long() - 1) % BS).contiguous()
        extra = {"order": lens.sort(descending=True, stable=True).indices.int()} if args.order else {}
        if args.no_preload:
            extra["preload"] = False
        if args.qk_norm:  # (q weight, k weight, eps, cos, sin) as Qwen3Attention passes them
            w = torch.ones(D, device="cuda", dtype=torch.bfloat16)
            extra["qk_norm"] = (w, w, 1e-6, *torch.randn(2, B, D, device="cuda", dtype=torch.bfloat16))
        nbytes = 2 * int(lens.sum()) * Hkv * D * 2
        if args.launch or args.default_only:
            grid = [tuple(int(x) for x in args.launch.split(","))] if args.launch else [(None, None, DEFAULT_STAGES)]
        elif args.quick:
            grid = itertools.product((32, 64), (2, 4), (2, 3))
        else:
            grid = itertools.product((32, 64, 128), (2, 4, 8), (2, 3, 4))
        splits_list = [num_splits(B, Hkv, Hq // Hkv, int(lens.max()), BS, q.device) if x == "auto" else int(x)
                       for x in args.splits.split(",")]
        for (tile, tile_warps, stages), splits in itertools.product(list(grid), splits_list):
            # None: the engine's launch for this batch and split count
            block_n, warps = (tile, tile_warps) if tile is not None else launch(B, splits, Hq // Hkv, BS)
            try:
                def step():
                    return paged_decode_attention(q, k_new, v_new, kc, vc, slots, tables, lens, D ** -0.5,
                                                  block_n, warps, stages, num_splits=splits, **extra)

                ms = triton.testing.do_bench_cudagraph(step, rep=100)  # replayed as the decode graphs are
            except Exception as e:  # a configuration that does not compile (shared memory) is skipped
                print(f"{shape} ctx {kind} block_n {block_n} warps {warps} stages {stages}: {type(e).__name__}")
                continue
            tbs = nbytes / ms / 1e9
            order = (" longest-first" * args.longest_first + " order" * args.order + " head-major" * args.head_major
                     + " pdl" * args.pdl + " qk-norm" * args.qk_norm + " no-preload" * args.no_preload)
            print(f"{shape} B {B}{order} ctx {str(kind):>5s} block_n {block_n:3d} warps {warps} stages {stages} "
                  f"splits {splits:2d}: "
                  f"{ms * 1e3:8.1f} us {tbs:7.2f} TB/s ({tbs / 4.3:.0%} of 4.3 TB/s{own_share(tbs)})")


def own_share(tbs: float) -> str:
    """``, 58% of this H100's 3.0``: the share of this GPU's copy rate where it is known and not the H200's."""
    name = torch.cuda.get_device_name()
    word, bw = next(((w, b / 1e12) for w, b in COPY_BANDWIDTH.items() if w in name), ("H200", 4.3))
    return "" if word == "H200" else f", {tbs / bw:.0%} of this {word}'s {bw:g}"


if __name__ == "__main__":
    main()
