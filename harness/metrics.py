"""A run's metric columns. Serving metrics follow vLLM's benchmark_serving: TTFT, TPOT = (E2EL - TTFT) /
(output_len - 1), ITL (every gap between consecutive tokens), E2EL; output / total tok/s and req/s."""

from __future__ import annotations

import numpy as np


def percentiles(values, name: str, ps=(50, 99)) -> dict[str, float | None]:
    """``{name_p<p>}`` for each of ``ps`` over ``values``; None when there are no values."""
    v = np.asarray(values, dtype=np.float64)
    return {f"{name}_p{p}": float(np.percentile(v, p)) if v.size else None for p in ps}


def summarize(values_ms, name: str) -> dict[str, float | None]:
    """``{name_mean, name_p50, name_p90, name_p99, name_std}`` of ``values_ms`` (std: population, as vLLM's)."""
    v = np.asarray(values_ms, dtype=np.float64)
    return {f"{name}_mean": float(v.mean()) if v.size else None, **percentiles(v, name, (50, 90, 99)),
            f"{name}_std": float(v.std()) if v.size else None}


def throughput(requests: int, in_tokens: int, out_tokens: int, duration: float) -> dict:
    """The throughput columns of ``requests`` over ``duration`` s."""
    return {"num_requests": requests, "input_tokens": in_tokens, "output_tokens": out_tokens, "duration_s": duration,
            "output_tok_s": out_tokens / duration, "total_tok_s": (out_tokens + in_tokens) / duration,
            "req_s": requests / duration}


def latencies(out: dict) -> dict:
    """``ttft_ms``, ``tpot_ms`` (None for one token), ``itl_ms`` (a list) and ``e2el_ms`` of one engine output."""
    times, sent = out["token_times_s"], out["arrival_s"]
    ttft, e2el = (times[0] - sent) * 1e3, (times[-1] - sent) * 1e3
    return {"ttft_ms": ttft, "tpot_ms": (e2el - ttft) / (len(times) - 1) if len(times) > 1 else None,
            "itl_ms": (np.diff(times) * 1e3).tolist(), "e2el_ms": e2el}


def latency_columns(records: list[dict], names=("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")) -> dict:
    """``summarize`` of each of ``names`` over ``records``: None values left out, the ``itl_ms`` lists pooled."""
    row = {}
    for name in names:
        values = [r[name] for r in records if r[name] is not None]
        row.update(summarize([x for v in values for x in v] if name == "itl_ms" else values, name))
    return row


def request_metrics(outputs: list[dict], prompt_lens: list[int], start_s: float, end_s: float) -> dict:
    """Throughput and latency columns of one timed ``LLM.generate`` call; ``start_s``, ``end_s``: perf_counter()."""
    row = throughput(len(outputs), sum(prompt_lens), sum(len(o["token_ids"]) for o in outputs), end_s - start_s)
    return {**row, **latency_columns([latencies(o) for o in outputs if o["token_times_s"]])}


def serve_metrics(records: list[dict], work, start_s: float, last_s: float) -> dict:
    """The columns of one ``workload=serve`` run by vLLM's ``bench serve`` formulas: ``achieved_rate_req_s`` = (n - 1)
    / (last send - first send); ``goodput_req_s`` = requests meeting every SLO set (one token meets TPOT's) per s."""
    duration = last_s - start_s
    sent = sorted(r["sent_s"] for r in records)
    in_tokens, out_tokens = sum(r["input_len"] for r in records), sum(r["output_len"] for r in records)
    row = throughput(len(records), in_tokens, out_tokens, duration)
    row["achieved_rate_req_s"] = (len(sent) - 1) / (sent[-1] - sent[0]) if sent[-1] > sent[0] else None
    bounds = {k: v for k, v in work.slo.items() if v is not None}
    good = sum(all((r[k] or 0.0) <= b for k, b in bounds.items()) for r in records)
    row["goodput_req_s"] = good / duration if bounds else None
    return {**row, **latency_columns(records, ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "queue_ms"))}


def energy_per_token(energy_j: float | None, output_tokens: int | None) -> dict:
    """``j_per_output_token``: ``gpu_energy_j`` (J) per generated token; None without either."""
    return {"j_per_output_token": energy_j / output_tokens if energy_j is not None and output_tokens else None}


def step_metrics(steps) -> dict:
    """Decode step time p50/p99 (ms) and step counts from ``LLM.steps`` (StepRecord list)."""
    decode = [s.duration_s * 1e3 for s in steps if not s.is_prefill]
    return {"prefill_steps": len(steps) - len(decode), "decode_steps": len(decode),
            **percentiles(decode, "decode_step_ms")}


def message_metrics(send: dict, recv: dict) -> dict:
    """The message columns from rank 0's send and the workers' receive samples (``{"nbytes": [...], "ns": [...]}``)."""
    nbytes = send.get("nbytes", [])
    oneway_ns = [np.asarray(r["ns"], dtype=np.float64) for r in recv.values()]
    return {"ctrl_calls": len(nbytes), "ctrl_bytes_mean": float(np.mean(nbytes)) if nbytes else None,
            "ctrl_bytes_max": int(max(nbytes)) if nbytes else None,
            **percentiles(np.concatenate(oneway_ns) / 1e3 if oneway_ns else [], "ctrl_oneway_us"),
            **percentiles(np.asarray(send.get("ns", []), dtype=np.float64) / 1e3, "ctrl_send_us")}


def slowest_worker(recv: dict, key: str, num_steps: int) -> np.ndarray | None:
    """Per step, the largest of the workers' ``recv[rank][key]`` samples (ns, ``[num_steps]``); None when short."""
    workers = [np.asarray(r.get(key, []), dtype=np.float64) for r in recv.values()]
    if not workers or any(len(w) < num_steps for w in workers):
        return None
    return np.max(np.stack([w[:num_steps] for w in workers]), axis=0)


def control_metrics(stats: dict, steps) -> dict:
    """Control-plane columns from ``LLM.collect_control_stats()``: ``message_metrics``, ``launch_lag`` and
    ``ctrl_oneway_over_step_pct`` = the decode steps' slowest one-way latency over their time (%; not the plane's
    cost). Step i is message i: the stats are reset right before the timed run, whose only messages are its steps."""
    send, recv = stats.get("send") or {}, stats.get("recv") or {}
    decode_idx = [i for i, s in enumerate(steps) if not s.is_prefill]
    decode_s = sum(steps[i].duration_s for i in decode_idx)
    pct = None
    if decode_s > 0:  # so there are decode steps
        worst_ns = slowest_worker(recv, "ns", len(steps))
        if worst_ns is not None:
            pct = 100.0 * float(worst_ns[decode_idx].sum()) / 1e9 / decode_s
        elif not recv:
            pct = 0.0
    return {**message_metrics(send, recv), "ctrl_oneway_over_step_pct": pct, **launch_lag(recv, steps)}


def launch_lag(recv: dict, steps) -> dict:
    """The ``ctrl_launch_lag_us_*`` columns (us): over decode steps, how much later than rank 0 the slowest worker
    returned from the step's ``run()``; ``ctrl_launch_late_us_mean``: the mean of max(lag, 0). None without samples."""
    decode_idx = [i for i, s in enumerate(steps) if not s.is_prefill]
    latest = slowest_worker(recv, "launch_ns", len(steps))
    if latest is None or not decode_idx or any(steps[i].launch_ns is None for i in decode_idx):
        return dict.fromkeys(["ctrl_launch_lag_us_mean", "ctrl_launch_lag_us_p50", "ctrl_launch_lag_us_p99",
                              "ctrl_launch_late_us_mean"])
    lag_us = (latest[decode_idx] - np.array([steps[i].launch_ns for i in decode_idx], dtype=np.float64)) / 1e3
    return {"ctrl_launch_lag_us_mean": float(lag_us.mean()), **percentiles(lag_us, "ctrl_launch_lag_us"),
            "ctrl_launch_late_us_mean": float(np.maximum(lag_us, 0.0).mean())}
