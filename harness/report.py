"""What the harness prints: the per-run summary, the physical floor beside it, broadcast lines, one-line errors."""

from __future__ import annotations

import math
import os
import sys
from functools import partial

from .host_cpu import shared_note
from .workloads import Workload

MORE = " " * 14  # a line that goes on the one above
# bytes/s of a device-to-device copy measured on the device tool's machines (its KINDS.md), by a word of the GPU's
# name: the floor's bandwidth. A stream that only reads can beat it (the decode kernel: 99-104% on the H200).
COPY_BANDWIDTH = {"H200": 4.3e12, "H100": 3.0e12}
ALL_REDUCE_FLOOR_S = 3e-6  # s per all-reduce: below the fastest measured on the H200 pair (~5 us, symmetric memory)


def _fmt(row: dict, key: str, spec=".1f") -> str:
    v = row.get(key)  # "-" where missing or NaN; ``spec``: a format spec or a function
    return "-" if v is None or v != v else spec(v) if callable(spec) else format(v, spec)


def header(row: dict) -> str:
    """The settings the row has: ``[ok] shm, tp=2, qwen3-tiny on cpu, workload=serve, repeat 0 (all_reduce=gloo)``."""
    what = [row.get("engine") if row.get("engine") != "tp" else None, row.get("control"),
            f"tp={row['tp']}" if row.get("tp") is not None else None,
            f"{row['model']} on {row['device']}" if row.get("model") else row.get("device"),
            f"workload={row['workload']}" if row.get("workload") else None,
            ", ".join(str(row["overrides"]).split()) if row.get("overrides") else None,
            f"repeat {row['repeat']}" if row.get("repeat") is not None else None]
    extra = [f"{k}={row[k]}" for k in ("all_reduce", "gemm") if row.get(k) not in (None, "none", "torch")]
    return f"[{row['status']}] " + ", ".join(str(w) for w in what if w) + (f" ({', '.join(extra)})" if extra else "")


SWEEP_ROWS: list[dict] = []  # the ok rows this process wrote (the end-of-sweep summary reads them)


def control_lines(row: dict) -> list[str]:
    """The control plane's messages, one-way latency and the workers' launch lag, in words."""
    f = partial(_fmt, row)
    if row.get("tp") == 1:
        steps = row["prefill_steps"] + row["decode_steps"]
        return [f"  control     nothing sent: tp=1 has no worker ({steps} step{'s' * (steps != 1)} ran on rank 0 "
                "alone)"]
    if row.get("control") == "ideal":
        lines = [f"  control     {row['ctrl_calls']} messages replayed, none sent ({f('ctrl_bytes_mean', '.0f')} B "
                 f"on average); rank 0 checks one in {f('ctrl_send_us_p50')} us (p50)",
                 f"{MORE}ideal: each worker takes the next recorded message from its memory: no one-way latency"]
    else:
        lines = [f"  control     {row['ctrl_calls']} messages, {f('ctrl_bytes_mean', '.0f')} B on average; rank 0 "
                 f"spends {f('ctrl_send_us_p50')} us sending one (p50)"]
    if row.get("ctrl_oneway_us_p50") is not None:
        step = row.get("ctrl_oneway_over_step_pct") is not None
        over = (f"over the decode step: {f('ctrl_oneway_over_step_pct', '.2f')}%" if step
                else "no decode step to set it beside")
        lines.append(f"{MORE}a worker has it {f('ctrl_oneway_us_p50')} us after the send began (p50; p99 "
                     f"{f('ctrl_oneway_us_p99')}); {over}")
        if step:
            lines.append(f"{MORE}(the mean of each decode step's slowest one-way, over the mean decode step)")
    if row.get("ctrl_launch_lag_us_mean") is not None:
        lines.append(f"  launch      the last worker finishes a step {f('ctrl_launch_lag_us_mean')} us after rank 0 "
                     f"(mean; p50 {f('ctrl_launch_lag_us_p50')}, p99 {f('ctrl_launch_lag_us_p99')}; < 0: before)")
        lines.append(f"{MORE}rank 0 waits for late workers {f('ctrl_launch_late_us_mean')} us per decode step "
                     f"(the positive part only)")
    return lines


def latency_lines(row: dict) -> list[str]:
    """TTFT, TPOT, ITL and E2EL in ms as ``vllm bench serve`` gives them: mean, median (p50) and p99."""
    stats = ("mean", "p50", "p99")
    lines = [f"{'ms':<6}" + "".join(f"{s:>10}" for s in stats)]
    lines += [f"{m.upper():<6}" + "".join(f"{_fmt(row, f'{m}_ms_{s}', '.2f'):>10}" for s in stats)
              for m in ("ttft", "tpot", "itl", "e2el")]
    return ["  latency     " + lines[0]] + [MORE + line for line in lines[1:]]


def gpu_lines(row: dict) -> list[str]:
    """The GPU lines: utilisation, memory, power and, where measured, the run's energy; else why not."""
    f = partial(_fmt, row)
    lines = []
    if row.get("gpu_util_pct_mean") is not None:
        lines.append(f"busy {f('gpu_util_pct_mean')}% of the time on average (max {f('gpu_util_pct_max')}%), "
                     f"{f('gpu_mem_used_mib_max', '.0f')} MiB at most, {f('gpu_power_w_mean')} W")
    if row.get("gpu_energy_j") is not None:
        lines.append(f"{f('gpu_energy_j')} J over the timed run, {f('j_per_output_token', '.4f')} J per output token")
    if not lines:
        lines.append(f"not measured: {row.get('nvml') or 'no NVML samples'}")
    return [f"  GPU         {lines[0]}"] + [MORE + line for line in lines[1:]]


def print_summary(row: dict, path: str, step_log: str | None = None, files: list[str] = (),
                  run_file: str | None = None, floor: list[str] = ()) -> None:
    """Print one run's row in sentences, where it went (``path``), its ``run_file``, ``step_log``, other ``files``;
    ``floor``: ``floor_lines``, after the GPU's."""
    f = partial(_fmt, row)
    print("\n" + header(row))
    if row["status"] == "stalled":
        print(f"  warning     {row['error']}: its latencies include that (the analysis leaves the row out)")
    if shared := shared_note(row):
        print(f"  warning     {shared}")
    if row["status"] not in ("ok", "stalled"):
        print(f"  error       {row['error']}")
    else:
        rate = partial(_fmt, row, spec=lambda v: f"{v:.4g}" if abs(v) < 999.5 else f"{v:.0f}")  # 0.025, not 0.03
        print(f"  throughput  {f('output_tok_s')} output tok/s ({f('total_tok_s')} with the prompts), "
              f"{rate('req_s')} req/s: {row['output_tokens']} tokens in {f('duration_s', '.2f')} s")
        if row.get("request_rate") is not None:
            good = (f"{rate('goodput_req_s')} req/s meet {row['slo']}" if row.get("slo") else "no SLO set")
            print(f"  load        {row['request_rate']:g} req/s asked, {rate('achieved_rate_req_s')} sent "
                  f"(start to last send), {rate('req_s')} completed (start to last token)")
            print(f"{MORE}goodput: {good}")
            print(f"{MORE}peaks (vLLM's, 1 s buckets): {f('peak_output_tok_s', '.0f')} output tok/s; "
                  f"{f('peak_concurrent_requests', '.0f')} requests in one bucket, not necessarily at once")
            if row.get("control") == "ideal" and row.get("tp") != 1:
                print(f"{MORE}ideal replays its recording's admissions: compare its step and TPOT, not its TTFT")
            print(f"{MORE}waiting to be scheduled p50 {f('queue_ms_p50', '.2f')} ms, p99 "
                  f"{f('queue_ms_p99', '.2f')} ms; the loop's own cost {f('serve_loop_us_per_step')} us per step")
        print("\n".join(latency_lines(row)))
        if row.get("prefill_steps") is not None:  # engine=hf runs no engine steps
            decode = f"; a decode step takes {f('decode_step_ms_p50', '.2f')} ms (p50)" if row["decode_steps"] else ""
            print(f"  steps       {row['prefill_steps']} prefill and {row['decode_steps']} decode steps{decode}")
        if row.get("ctrl_calls") is not None or row.get("tp") == 1 and row.get("decode_steps") is not None:
            print("\n".join(control_lines(row)))
        print("\n".join(gpu_lines(row) + list(floor)))
    if step_log:
        print(f"  steps       per-step timings in {step_log} (python -m harness.step_log {step_log})")
    print(f"  row appended to {path}")
    if run_file:
        print(f"  run file    {run_file} (its configuration, columns, vLLM's names)")
    for line in files:
        print(f"  {line}")


def trace_lines(traces: list[str], profile_steps, steps: int) -> list[str]:
    """``profile=torch``'s lines for ``print_summary``'s ``files``: a line per trace file, or why there is none."""
    if not traces:
        return [f"traces      none: profile_steps={profile_steps} starts after the timed run's {steps} steps "
                f"(numbered from 0)"]
    where = ["" if os.path.isfile(path) else " (not on this host: another node's, or not written)" for path in traces]
    return ([f"trace       {traces[0]}{where[0]} (rank 0; open it in ui.perfetto.dev or chrome://tracing)"]
            + [f"trace       {path}{note}" for path, note in zip(traces[1:], where[1:])])


def decode_floor(prompt_lens: list[int], output_lens: list[int], hf: dict, bytes_per_elt: int, tp: int,
                 bandwidth: float) -> dict:
    """The physical floor of a decode-heavy workload (the method of results/h200/NOTES.md, "The two floors"). Each
    decode step reads every weight once (each GPU its 1/tp share) and the K/V of every running sequence's context,
    and with tp > 1 runs 2 all-reduces per layer, one after the embedding and one in the sampler. With all requests
    running together, the steps number max(output lengths) and request i at its j-th generated token reads
    (prompt_i + j) tokens of K/V. Floor time = bytes / (tp * bandwidth (bytes/s)) + steps * all-reduces *
    ALL_REDUCE_FLOOR_S.
    Per GPU: the bytes decode must read (``weight_bytes``, ``kv_bytes``), ``all_reduces_per_step``, the floor
    ``floor_s`` (s), ``floor_tok_s`` (output tok/s), ``step_floor_ms`` (the mean decode step, ms: a TPOT floor)."""
    H, L, D = hf["hidden_size"], hf["num_hidden_layers"], hf["head_dim"]
    q, kv = hf["num_attention_heads"] * D, hf["num_key_value_heads"] * D
    inter, V = hf["intermediate_size"], hf["vocab_size"]
    per_layer = H * (q + 2 * kv) + q * H + 3 * H * inter + 2 * H + 2 * D
    weights = (L * per_layer + V * H + H) * bytes_per_elt  # layers + LM head (tied or not, read once) + norm
    kv_tokens = sum(p * (o - 1) + (o - 1) * o // 2 for p, o in zip(prompt_lens, output_lens))
    steps = max(output_lens)
    all_reduces = 2 * L + 2 if tp > 1 else 0
    weight_bytes, kv_bytes = weights * steps, 2 * L * kv * bytes_per_elt * kv_tokens  # K and V of each token
    seconds = (weight_bytes + kv_bytes) / (tp * bandwidth) + steps * all_reduces * ALL_REDUCE_FLOOR_S
    return {"weight_bytes": weight_bytes / tp, "kv_bytes": kv_bytes / tp, "floor_s": seconds,
            "floor_tok_s": sum(output_lens) / seconds, "all_reduces_per_step": all_reduces,
            "step_floor_ms": seconds / steps * 1e3}


def floor_lines(row: dict, work: Workload, llm) -> list[str]:
    """The measured throughput and TPOT next to the physical floor (``decode_floor``) at the GPU's bandwidth, for
    ``print_summary``'s ``floor``."""
    bandwidth = next((bw for word, bw in COPY_BANDWIDTH.items() if word in (row.get("gpu_name") or "")), None)
    if bandwidth is None:
        return [f"  floor       none: no copy bandwidth measured for {row.get('gpu_name') or 'this GPU'} "
                "(harness/report.py's COPY_BANDWIDTH)"]
    f = decode_floor(work.prompt_lens, [p.max_tokens for p in work.params], llm.config.hf_config,
                     llm.config.torch_dtype.itemsize, row["tp"], bandwidth)
    ar = (f" + {f['all_reduces_per_step']} all-reduces x {ALL_REDUCE_FLOOR_S * 1e6:g} us per step"
          if f["all_reduces_per_step"] else "")
    gb = partial(_fmt, f, spec=lambda b: f"{b / 1e9:.1f} GB" if b < 1e12 else f"{b / 1e12:.2f} TB")
    paced = work.request_rate is not None and math.isfinite(work.request_rate)  # the floor runs every request at once
    share = (f", paced by {work.request_rate:g} req/s" if paced
             else f" = {100 * row['output_tok_s'] / f['floor_tok_s']:.0f}% of it")
    return [f"  floor       per GPU decode reads {gb('weight_bytes')} of weights + {gb('kv_bytes')} of KV at "
            f"{bandwidth / 1e12:g} TB/s{ar}:",
            f"{MORE}<= {f['floor_tok_s']:.0f} output tok/s, decode step >= {f['step_floor_ms']:.3f} ms; measured "
            f"{row['output_tok_s']:.0f} tok/s{share}, TPOT p50 {row['tpot_ms_p50']:.3f} ms"]


def stall_error(silent: dict[int, float]) -> str | None:
    """A stalled run's ``error`` from ``{rank: longest silence (s)}`` (a cluster's ``silent_s``), None if none."""
    return "; ".join(f"{'rank 0 (this process) made no progress' if r == 0 else f'rank {r} was silent'} for {s:.1f} s "
                     "in this run (stopped, or stuck holding the GIL)" for r, s in sorted(silent.items())) or None


def print_broadcast(row: dict, messages: int) -> None:
    """Print one broadcast row: plane, payload, one-way and send p50/p99 (us), messages (why fewer than asked)."""
    us, n = partial(_fmt, row), row["ctrl_calls"]
    why = ", fewer: max_bytes_per_payload caps them" if n < messages else ""
    print(f"{row['control']:>6} tp={row['tp']} {row['payload']:>18} {row['payload_bytes']:>10} B  one-way us p50 "
          f"{us('ctrl_oneway_us_p50'):>9} p99 {us('ctrl_oneway_us_p99'):>9} | send us p50 "
          f"{us('ctrl_send_us_p50'):>9} p99 {us('ctrl_send_us_p99'):>9}  ({n} msgs{why})")
    if shared := shared_note(row):
        print(f"{'':>6} warning: {shared}")


def one_line(e: BaseException) -> str:
    """``e`` as one line for the ``error`` column: its type, first line and, when longer, its last line."""
    if isinstance(e, KeyboardInterrupt):
        return f"interrupted ({e.args[0] if e.args else 'SIGINT'})"
    text = str(e).strip().splitlines()
    head = text[0] if text else type(e).__name__
    return f"{type(e).__name__}: {head}" + (f" ... {text[-1].strip()}" if len(text) > 1 else "")


def show_progress(progress: bool) -> bool:
    """Whether to draw tqdm bars: asked for and stderr is a terminal (into a file every refresh is a line)."""
    return bool(progress) and sys.stderr.isatty()
