"""What the harness prints: the per-run summary, the floor beside it, broadcast lines, one-line errors."""

from __future__ import annotations

import sys

import torch

from .floor import decode_floor
from .workloads import Workload


def print_summary(row: dict, path: str, step_log: str | None = None) -> None:
    """Print one engine run's row (throughput, latency in ms, control plane in us, GPU) and where it went
    (and its per-step timings, ``step_log``)."""
    def f(key, spec=".1f"):
        v = row.get(key)
        return "-" if v is None else format(v, spec)

    control = f" control={row['control']}" if row.get("control") else ""
    control += f" all_reduce={row['all_reduce']}" if row.get("all_reduce") not in (None, "none") else ""
    control += f" gemm={row['gemm']}" if row.get("gemm") not in (None, "torch") else ""
    extra = f" {row['overrides']}" if row.get("overrides") else ""
    print(f"\n[{row['status']}] engine={row['engine']}{control} tp={row['tp']} model={row['model']} "
          f"device={row['device']} workload={row['workload']}{extra} repeat={row.get('repeat')}")
    if row["status"] != "ok":
        print(f"  error: {row['error']}")
    else:
        print(f"  throughput  {f('output_tok_s')} output tok/s, {f('total_tok_s')} total tok/s, "
              f"{f('req_s', '.2f')} req/s ({row['output_tokens']} output tokens in {f('duration_s', '.2f')} s)")
        if row.get("request_rate") is not None:
            print(f"  serve       request rate {row['request_rate']:g} req/s asked, {f('achieved_rate_req_s', '.2f')} "
                  f"sent, {f('req_s', '.2f')} completed; goodput {f('goodput_req_s', '.2f')} req/s "
                  f"(slo: {row.get('slo') or 'none set'}); queueing ms p50 {f('queue_ms_p50', '.2f')} p99 "
                  f"{f('queue_ms_p99', '.2f')}; loop {f('serve_loop_us_per_step', '.1f')} us/step")
        print(f"  latency ms  TTFT p50 {f('ttft_ms_p50')} p99 {f('ttft_ms_p99')} | TPOT p50 {f('tpot_ms_p50', '.2f')} "
              f"| ITL p99 {f('itl_ms_p99', '.2f')} | E2EL p50 {f('e2el_ms_p50')} | decode step p50 "
              f"{f('decode_step_ms_p50', '.2f')}")
        if row.get("ctrl_calls") is not None:
            print(f"  control     {row.get('ctrl_calls')} calls, {f('ctrl_bytes_mean', '.0f')} B mean; one-way us p50 "
                  f"{f('ctrl_oneway_us_p50')} p99 {f('ctrl_oneway_us_p99')}; send us p50 {f('ctrl_send_us_p50')}; "
                  f"one-way / step {f('ctrl_oneway_over_step_pct', '.2f')}%; launch lag us mean "
                  f"{f('ctrl_launch_lag_us_mean')} p50 {f('ctrl_launch_lag_us_p50')} "
                  f"p99 {f('ctrl_launch_lag_us_p99')}, late mean {f('ctrl_launch_late_us_mean')}")
        print(f"  GPU         util mean {f('gpu_util_pct_mean')}% max {f('gpu_util_pct_max')}%, "
              f"mem max {f('gpu_mem_used_mib_max', '.0f')} MiB, power {f('gpu_power_w_mean')} W")
    if step_log and row["status"] == "ok":
        print(f"  steps       per-step timings in {step_log} (python -m harness.step_log {step_log})")
    print(f"  row appended to {path}")


def print_floor(row: dict, work: Workload, llm) -> None:
    """The measured throughput and TPOT next to the physical floor (harness/floor.py): bytes read per GPU at
    4.3 TB/s, plus 3 us per all-reduce."""
    elt = torch.empty(0, dtype=llm.config.torch_dtype).element_size()
    f = decode_floor(work.prompt_lens, [p.max_tokens for p in work.params], llm.config.hf_config, elt, row["tp"])
    ar = f" + {f['all_reduces_per_step']} all-reduces x 3 us per step" if f["all_reduces_per_step"] else ""
    print(f"  floor       per GPU decode reads {f['weight_bytes'] / 1e12:.3f} TB of weights + "
          f"{f['kv_bytes'] / 1e12:.3f} TB of KV at 4.3 TB/s{ar}: <= {f['floor_tok_s']:.0f} output tok/s, "
          f"decode step >= {f['step_floor_ms']:.3f} ms; measured {row['output_tok_s']:.0f} tok/s = "
          f"{100 * row['output_tok_s'] / f['floor_tok_s']:.0f}% of it, TPOT p50 {row['tpot_ms_p50']:.3f} ms")


def print_broadcast(row: dict, path: str) -> None:
    """Print one broadcast row: the plane, payload, bytes, one-way and send latency p50/p99 (us)."""
    def us(key):
        return "-" if row.get(key) is None else f"{row[key]:.1f}"

    print(f"{row['control']:>6} tp={row['tp']} {row['payload']:>18} {row['payload_bytes']:>10} B  one-way us p50 "
          f"{us('ctrl_oneway_us_p50'):>9} p99 {us('ctrl_oneway_us_p99'):>9} | send us p50 "
          f"{us('ctrl_send_us_p50'):>9} p99 {us('ctrl_send_us_p99'):>9}  ({row['ctrl_calls']} msgs)")


def one_line(e: BaseException) -> str:
    """``e`` as one line for the ``error`` column: its type, first line and, when longer, its last line."""
    if isinstance(e, KeyboardInterrupt):
        return f"interrupted ({e.args[0] if e.args else 'SIGINT'})"
    text = str(e).strip().splitlines()
    head = text[0] if text else type(e).__name__
    return f"{type(e).__name__}: {head}" + (f" ... {text[-1].strip()}" if len(text) > 1 else "")


def show_progress(progress: bool) -> bool:
    """Whether to draw tqdm bars: asked for (``progress=true``, the default) and stderr is a terminal. Into a
    log file or a pipe a bar is not redrawn in place: every refresh would add a line of its own."""
    return bool(progress) and sys.stderr.isatty()
