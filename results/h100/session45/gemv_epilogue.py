"""Calls 118-119's experiment (session 44): what the GEMV's `add` epilogue (the residual add and one float atomic of
the row's squares per program) costs o_proj and down_proj at batch 1, and whether one address for every program's
atomic is the cost. us per call with PDL, 32 calls in one CUDA graph over weight copies (bench_gemv.py's timing),
best of 3: plain; add with sum_sq of 1 slot (main's engine); of 32 slots (program % 32: the branch ss-slots).
From the repository root: python results/h100/session45/gemv_epilogue.py
"""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "scripts"))
from bench_gemv import HBM_BYTES_S, time_us  # noqa: E402

from engine.layers import pdl  # noqa: E402
from engine.layers.gemv import gemv  # noqa: E402
from engine.layers.pdl import set_pdl  # noqa: E402

dev = torch.device("cuda")
assert set_pdl(True, dev)
pdl.ENABLED = True
print(torch.cuda.get_device_name(), flush=True)
SHAPES = {"0.6b o_proj": (1024, 2048), "0.6b down": (1024, 3072), "8b o_proj": (4096, 4096),
          "8b down": (4096, 12288), "8b qkv": (6144, 4096)}
for name, (n, k) in SHAPES.items():
    copies = max(2, min(64, (256 << 20) // (n * k * 2)))
    ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
    x = torch.randn(1, k, device=dev, dtype=torch.bfloat16)
    res = torch.randn(1, n, device=dev, dtype=torch.bfloat16)
    ss = torch.zeros(64, device=dev, dtype=torch.float32)
    y = gemv(x, ws[0], add=(res, ss[:32]))
    want = x.float() @ ws[0].float().T + res.float()
    assert (y.float() - want).abs().max() < 0.02 * want.abs().max()
    assert abs(ss.sum().item() - y.float().pow(2).sum().item()) < 1e-3 * ss.sum().item(), "the slots' sum"
    floor = n * k * 2 / HBM_BYTES_S * 1e6
    cells = []
    for label, kw in (("plain", {}), ("add 1 slot", dict(add=(res, ss[:1]))),
                      ("add 32 slots", dict(add=(res, ss[:32]))), ("plain again", {})):
        t = min(time_us(lambda i, kw=kw, x=x, ws=ws: gemv(x, ws[i], **kw), copies) for _ in range(3))
        cells.append(f"{label} {t:.2f}")
    print(f"{name} {n}x{k} floor {floor:.2f} us: " + "; ".join(cells), flush=True)
    ws.clear()
    torch.cuda.empty_cache()
