"""Would a persistent decode step beat the kernel-per-stage chain at batch 1? Qwen3-0.6B's 28 layers of GEMVs (the
norms, the residual adds and SwiGLU included; attention replaced by passing q through to o_proj) run two ways on
the same weights, each replayed in a CUDA graph:

- the engine's chain: ``norm_gemv``, ``gemv``, ``norm_gemv`` (SwiGLU), ``gemv`` per layer, under PDL;
- one persistent kernel of ``P`` programs: every program owns the same rows of each projection in every layer and
  meets the others at a grid barrier (a counter per stage) between stages. Before it waits, it issues the loads of
  the weights it needs next, ``DEPTH`` stages ahead (1 or 2), so HBM streams across the barriers (Hazy Research's
  "No Bubbles" megakernel keeps it busy across stages likewise).

Session 18 (call 67) found a grid barrier dearer than a PDL boundary (1.1 against 0.7 us) with nothing to load;
this asks whether loading the next stages' weights across the barrier wins more than that. Prints ms per replay,
us per layer and the share of 4.3 TB/s, and the largest error of each way against a float32 torch reference.

    python scripts/persistent_layers.py [--layers 28] [--replays 50]
"""

import argparse
import statistics

import torch
from gpu_only import graph_ms, require_cuda

if __name__ == "__main__":
    require_cuda()
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

H, QKV, QO, INTER = 1024, 4096, 2048, 3072  # Qwen3-0.6B: hidden, q+k+v rows, q rows (o_proj's K), intermediate
POLLS = tl.constexpr(200_000)  # a barrier's polls before the kernel gives up (not all programs resident): no hang


@triton.jit
def _wait(ctr_ptr, target, flag_ptr):
    seen = tl.atomic_add(ctr_ptr, 0, sem="acquire")
    n = 0
    while (seen < target) & (n < POLLS):
        seen = tl.atomic_add(ctr_ptr, 0, sem="acquire")
        n += 1
        if n % 1024 == 0:
            n = tl.where(tl.load(flag_ptr, volatile=True) != 0, POLLS, n)
    if seen < target:
        tl.store(flag_ptr, 1)


@triton.jit
def _signal(ctr_ptr):
    tl.debug_barrier()  # every thread's stores before the counter (release, GPU scope)
    tl.atomic_add(ctr_ptr, 1, sem="release")


@triton.jit
def _tile(w_ptr, layer, n_rows, rows0, ROWS_OK: tl.constexpr, ROWS: tl.constexpr, K: tl.constexpr,
          BK: tl.constexpr):
    """Rows [rows0, rows0 + ROWS_OK) of layer ``layer``'s ``[n_rows, K]`` weight: ``[ROWS, BK]``, 0-padded."""
    r = tl.arange(0, ROWS)
    k = tl.arange(0, BK)
    ptrs = w_ptr + (layer * n_rows + rows0 + r)[:, None].to(tl.int64) * K + k[None, :]
    return tl.load(ptrs, mask=(r < ROWS_OK)[:, None] & (k < K)[None, :], other=0.0)


@triton.jit
def _normed(h_ptr, n_ptr, layer, eps, K: tl.constexpr):
    k = tl.arange(0, K)
    x = tl.load(h_ptr + k, cache_modifier=".cg")
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / K + eps)
    return x * rstd * tl.load(n_ptr + layer * K + k).to(tl.float32)


@triton.jit
def _dot(w, x_ptr, K: tl.constexpr, BK: tl.constexpr):
    k = tl.arange(0, BK)
    x = tl.load(x_ptr + k, mask=k < K, other=0.0, cache_modifier=".cg")
    return tl.sum(w.to(tl.float32) * x[None, :], axis=1)


@triton.jit
def _store_rows(y_ptr, rows0, y, ROWS_OK: tl.constexpr, ROWS: tl.constexpr, ADD: tl.constexpr):
    r = tl.arange(0, ROWS)
    ok = r < ROWS_OK
    if ADD:
        y += tl.load(y_ptr + rows0 + r, mask=ok, other=0.0, cache_modifier=".cg")
    tl.store(y_ptr + rows0 + r, y, mask=ok)


@triton.jit
def _layers_kernel(h_ptr, n1_ptr, n2_ptr, wqkv_ptr, wo_ptr, wgu_ptr, wd_ptr, qkv_ptr, act_ptr, ctr_ptr, flag_ptr,
                   L, eps, P: tl.constexpr, H: tl.constexpr, QKV: tl.constexpr, QO: tl.constexpr,
                   INTER: tl.constexpr, RQ: tl.constexpr, RQP: tl.constexpr, RO: tl.constexpr, ROP: tl.constexpr,
                   RG: tl.constexpr, RGP: tl.constexpr, RD: tl.constexpr, RDP: tl.constexpr, BKI: tl.constexpr,
                   DEPTH: tl.constexpr):
    pid = tl.program_id(0)
    w_qkv = _tile(wqkv_ptr, 0, QKV, pid * RQ, RQ, RQP, H, H)
    if DEPTH == 2:
        w_o = _tile(wo_ptr, 0, H, pid * RO, RO, ROP, QO, QO)
    for layer in range(L):
        nxt = tl.minimum(layer + 1, L - 1)
        ctr = ctr_ptr + 4 * layer
        if layer > 0:
            _wait(ctr - 1, P, flag_ptr)
        qkv = tl.sum(w_qkv.to(tl.float32) * _normed(h_ptr, n1_ptr, layer, eps, H)[None, :], axis=1)
        _store_rows(qkv_ptr, pid * RQ, qkv, RQ, RQP, False)
        if DEPTH == 1:
            w_o = _tile(wo_ptr, layer, H, pid * RO, RO, ROP, QO, QO)
        else:
            w_g = _tile(wgu_ptr, layer, 2 * INTER, pid * RG, RG, RGP, H, H)
            w_u = _tile(wgu_ptr, layer, 2 * INTER, INTER + pid * RG, RG, RGP, H, H)
        _signal(ctr)
        _wait(ctr, P, flag_ptr)
        _store_rows(h_ptr, pid * RO, _dot(w_o, qkv_ptr, QO, QO), RO, ROP, True)  # attention: q passed through
        if DEPTH == 1:
            w_g = _tile(wgu_ptr, layer, 2 * INTER, pid * RG, RG, RGP, H, H)
            w_u = _tile(wgu_ptr, layer, 2 * INTER, INTER + pid * RG, RG, RGP, H, H)
        else:
            w_d = _tile(wd_ptr, layer, H, pid * RD, RD, RDP, INTER, BKI)
        _signal(ctr + 1)
        _wait(ctr + 1, P, flag_ptr)
        xn = _normed(h_ptr, n2_ptr, layer, eps, H)
        gate = tl.sum(w_g.to(tl.float32) * xn[None, :], axis=1)
        up = tl.sum(w_u.to(tl.float32) * xn[None, :], axis=1)
        _store_rows(act_ptr, pid * RG, gate / (1.0 + tl.exp(-gate)) * up, RG, RGP, False)
        if DEPTH == 1:
            w_d = _tile(wd_ptr, layer, H, pid * RD, RD, RDP, INTER, BKI)
        else:
            w_qkv = _tile(wqkv_ptr, nxt, QKV, pid * RQ, RQ, RQP, H, H)
        _signal(ctr + 2)
        _wait(ctr + 2, P, flag_ptr)
        _store_rows(h_ptr, pid * RD, _dot(w_d, act_ptr, INTER, BKI), RD, RDP, True)
        if DEPTH == 1:
            w_qkv = _tile(wqkv_ptr, nxt, QKV, pid * RQ, RQ, RQP, H, H)
        else:
            w_o = _tile(wo_ptr, nxt, H, pid * RO, RO, ROP, QO, QO)
        _signal(ctr + 3)


def pow2(n: int) -> int:
    return triton.next_power_of_2(n)


def persistent(w: dict, h: torch.Tensor, programs: int, depth: int, num_warps: int):
    """A launcher of the persistent kernel over ``w``'s layers, updating h ``[H]`` float32 in place, or None with
    the reason when ``programs`` cannot all be resident at once (a grid barrier would never open)."""
    p, dev, layers = programs, h.device, w["qkv"].shape[0]
    qkv, act = torch.empty(QKV, device=dev), torch.empty(INTER, device=dev)
    ctr, flag = torch.zeros(4 * layers, dtype=torch.int32, device=dev), torch.zeros(1, dtype=torch.int32, device=dev)
    rows = {"RQ": QKV // p, "RO": H // p, "RG": INTER // p, "RD": H // p}
    kw = dict(P=p, H=H, QKV=QKV, QO=QO, INTER=INTER, BKI=pow2(INTER), DEPTH=depth, num_warps=num_warps,
              **rows, **{k + "P": pow2(v) for k, v in rows.items()})
    args = (h, w["n1"], w["n2"], w["qkv"], w["o"], w["gu"], w["d"], qkv, act, ctr, flag, layers, 1e-6)
    k = _layers_kernel.warmup(*args, grid=(p,), **kw)
    k._init_handles()
    regs = -(-k.n_regs * 32 // 256) * 256 * num_warps  # registers per program, allocated per warp in 256s
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    fit = min(65536 // regs, 2048 // (32 * num_warps), 32) * sms
    note = f"{k.n_regs} registers/thread, {k.n_spills} spilled, {fit} programs fit at once"
    if p > fit:
        return None, note

    def launch():
        ctr.zero_()
        _layers_kernel[(p,)](*args, **kw)
    return (launch, flag), note


def chain(w: dict, h: torch.Tensor):
    """The engine's kernels (PDL on) over ``w``'s layers, from h ``[H]`` float32: returns a launcher that leaves the
    residual stream in its ``out`` ``[H]`` float32."""
    from engine.layers import gemv, pdl

    pdl.set_pdl(True, h.device)
    out = torch.empty_like(h)

    def launch():
        x, res = h.to(torch.bfloat16)[None], None
        for i in range(w["qkv"].shape[0]):
            q, res = gemv.norm_gemv(x, res, w["n1"][i], 1e-6, w["qkv"][i])
            o = gemv.gemv(q[:, :QO], w["o"][i])
            a, res = gemv.norm_gemv(o, res, w["n2"][i], 1e-6, w["gu"][i], swiglu=True)
            x = gemv.gemv(a, w["d"][i])
        out.copy_((x.float() + res.float())[0])
    return launch, out


def reference(w: dict, h0: torch.Tensor) -> torch.Tensor:
    """The same layers in float32 torch: ``[H]``."""
    def norm(x, n):
        return x * torch.rsqrt(x.pow(2).mean() + 1e-6) * n.float()
    x = h0.clone()
    for i in range(w["qkv"].shape[0]):
        x = x + w["o"][i].float() @ (w["qkv"][i].float() @ norm(x, w["n1"][i]))[:QO]
        g, u = (w["gu"][i].float() @ norm(x, w["n2"][i])).split(INTER)
        x = x + w["d"][i].float() @ (torch.nn.functional.silu(g) * u)
    return x


def timed(launch, replays: int, rounds: int = 5) -> float:
    launch()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    return statistics.median(graph_ms(graph, replays) for _ in range(rounds))


def setup(ap=None):
    """The command line (``ap``: a parser to add to), random weights of ``--layers`` layers, h0 ``[H]``, and a
    ``report(name, launch, out, flag=None, against=None)`` that times ``launch`` and prints its ms, us per layer,
    share of 4.3 TB/s and error against the float32 reference (or ``against``; ``flag``: set when a barrier gave
    up). Shared with ``stream_layers.py``, which also gets the parsed arguments."""
    ap = ap or argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--replays", type=int, default=50)
    args = ap.parse_args()
    torch.manual_seed(0)
    dev, n = torch.device("cuda"), args.layers

    def weight(rows, k):
        return (torch.randn(n, rows, k, device=dev) * (0.5 / k ** 0.5)).to(torch.bfloat16)
    w = {"qkv": weight(QKV, H), "o": weight(H, QO), "gu": weight(2 * INTER, H), "d": weight(H, INTER),
         "n1": (1 + 0.1 * torch.randn(n, H, device=dev)).to(torch.bfloat16),
         "n2": (1 + 0.1 * torch.randn(n, H, device=dev)).to(torch.bfloat16)}
    h0 = torch.randn(H, device=dev)
    ref = reference(w, h0)
    mb = sum(t.numel() * t.element_size() for t in w.values()) / 1e6
    floor_us = mb / 4.3e6 * 1e6
    print(f"Qwen3-0.6B shapes, {n} layers, {mb:.0f} MB of weights: floor {floor_us:.1f} us at 4.3 TB/s "
          f"({floor_us / n:.2f} us per layer); ms per replay, median of 5 timings of {args.replays}")

    def report(name, launch, out, flag=None, against=None):
        ms = timed(launch, args.replays)
        launch()
        torch.cuda.synchronize()
        want = ref if against is None else against
        err = ((out - want).abs().max() / want.abs().max()).item()
        stuck = "  TIMED OUT at a barrier" if flag is not None and flag.item() else ""
        print(f"  {name:44s} {ms:7.4f} ms  {ms * 1e3 / n:6.2f} us/layer  {floor_us / (ms * 1e3):5.1%} of 4.3 TB/s"
              f"  max error {err:.1e}{stuck}", flush=True)
    return w, h0, report, args


def main():
    w, h0, report, _ = setup()
    h = h0.clone()
    launch, out = chain(w, h)
    report("engine chain (norm_gemv, gemv; PDL)", launch, out)
    for programs, warps in [(256, 8), (256, 4), (512, 4), (128, 8)]:
        for depth in (1, 2):
            h = h0.clone()
            made, note = persistent(w, h, programs, depth, warps)
            name = f"persistent, {programs} programs x {warps} warps, depth {depth}"
            if made is None:
                print(f"  {name}: skipped ({note})")
                continue
            go, flag = made

            def launch(go=go, h=h):
                h.copy_(h0)
                go()
            print(f"  ({note})")
            report(name, launch, h, flag)


if __name__ == "__main__":
    main()
