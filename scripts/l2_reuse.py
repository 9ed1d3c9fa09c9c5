"""Does a GEMV read faster from L2, and do ``l2_prefetch``'s hints put the weight there? One GEMV per shape
after L2 is flushed (cold), after a read of the weight (``sum``), and after the hint kernel, each timed alone
with CUDA events behind a spin kernel (so launch latency is not timed); the hint kernel and the read timed too.

    python scripts/l2_reuse.py [--reps 20]
"""

import argparse
import statistics

import torch
from gpu_only import require_cuda

SHAPES = {"qwen3-8b o_proj": (4096, 4096), "qwen3-8b qkv_proj": (6144, 4096), "qwen3-0.6b gate_up": (6144, 1024),
          "qwen3-0.6b down": (1024, 3072)}


def timed(fn) -> float:
    """Microseconds of the GPU work ``fn`` enqueues, measured behind a spin kernel."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(200_000)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    require_cuda()
    from engine.layers.gemv import gemv
    from engine.layers.l2_prefetch import l2_prefetch

    flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    for name, (n, k) in SHAPES.items():
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        mb = w.numel() * 2 / 2**20
        rows = {}
        for label, warm in (("cold", None), ("after a read", lambda: w.sum()),
                            ("after the hints", lambda: l2_prefetch([w], 1 << 30))):
            gemv_us, warm_us = [], []
            for _ in range(args.reps + 3):
                flush.zero_()
                if warm is not None:
                    warm_us.append(timed(warm))
                    torch.cuda._sleep(2_000_000)  # let the hints land
                gemv_us.append(timed(lambda: gemv(x, w)))
            rows[label] = (statistics.median(gemv_us[3:]), statistics.median(warm_us[3:]) if warm_us else None)
        floor = w.numel() * 2 / 4.3e12 * 1e6
        print(f"{name} [{n}, {k}] {mb:.1f} MB, floor {floor:.2f} us at 4.3 TB/s: " + "; ".join(
            f"GEMV {label} {g:.2f} us" + (f" (the warm-up itself {h:.2f} us)" if h else "")
            for label, (g, h) in rows.items()))


if __name__ == "__main__":
    main()
