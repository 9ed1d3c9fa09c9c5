"""A run's metric columns. Serving metrics follow vLLM's benchmark_serving: TTFT, TPOT = (E2EL - TTFT) /
(output_len - 1), ITL (every gap between consecutive tokens), E2EL; output / total tok/s and req/s. GPU
utilisation, memory and power: NVML, sampled by a background thread (:class:`NvmlSampler`); energy: NVML's
total-energy counter, read at its start and stop."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter

import numpy as np

try:
    import pynvml
except ImportError:  # nvidia-ml-py not installed
    pynvml = None


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
    """The columns of one ``workload=serve`` run by vLLM's ``bench serve`` formulas, its duration from the run's start:
    ``achieved_rate_req_s`` = n / last send (s from the start: vLLM sends the n-th at n / request_rate);
    ``goodput_req_s`` = requests meeting every SLO set (one token meets TPOT's) per s; ``peaks``."""
    duration, last_sent = last_s - start_s, max(r["sent_s"] for r in records)
    in_tokens, out_tokens = sum(r["input_len"] for r in records), sum(r["output_len"] for r in records)
    row = throughput(len(records), in_tokens, out_tokens, duration)
    row["achieved_rate_req_s"] = len(records) / last_sent if last_sent > 0 else None
    bounds = {k: v for k, v in work.slo.items() if v is not None}
    good = sum(all((r[k] or 0.0) <= b for k, b in bounds.items()) for r in records)
    row["goodput_req_s"] = good / duration if bounds else None
    names = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms", "queue_ms")
    return {**row, **peaks(records), **latency_columns(records, names)}


def peaks(records: list[dict]) -> dict:
    """vLLM's peaks over 1 s buckets from the first send: ``peak_output_tok_s``, the most tokens made in one bucket
    (a request's tokens at its send + TTFT, then + each ITL); ``peak_concurrent_requests``, the most requests in one
    bucket, a request counting in every bucket from its send's to its last token's."""
    first = min(r["sent_s"] for r in records)
    tokens, active = Counter(), Counter()
    for r in records:
        sent = r["sent_s"] - first
        tokens.update(int(sent + t / 1e3) for t in np.cumsum([r["ttft_ms"], *r["itl_ms"]]))
        active.update(range(int(sent), int(sent + r["e2el_ms"] / 1e3) + 1))
    return {"peak_output_tok_s": float(max(tokens.values())), "peak_concurrent_requests": max(active.values())}


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
    return {"ctrl_calls": len(nbytes), "ctrl_bytes_mean": float(np.mean(nbytes)) if nbytes else None,
            "ctrl_bytes_max": int(max(nbytes)) if nbytes else None,
            **percentiles([ns / 1e3 for r in recv.values() for ns in r["ns"]], "ctrl_oneway_us"),
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
    worst_ns = slowest_worker(recv, "ns", len(steps))
    sampled = decode_s > 0 and worst_ns is not None  # decode steps, every worker sampled at each step
    pct = 100.0 * float(worst_ns[decode_idx].sum()) / 1e9 / decode_s if sampled else None
    out = {**message_metrics(send, recv), "ctrl_oneway_over_step_pct": pct, **launch_lag(recv, steps)}
    return out if recv else dict.fromkeys(out)  # tp=1: no worker, nothing sent: empty cells, never 0


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


def pci_address(cuda_index: int) -> tuple[int, int, int]:
    """(domain, bus, device) of CUDA device ``cuda_index`` (as numbered after CUDA_VISIBLE_DEVICES)."""
    import torch

    p = torch.cuda.get_device_properties(cuda_index)
    return p.pci_domain_id, p.pci_bus_id, p.pci_device_id


def match_handles(cuda_indices: list[int], nvml, address=pci_address) -> tuple[list, str]:
    """(NVML handles of the CUDA devices ``cuda_indices`` by PCI address, "pci"); ([], why) when one has none.
    Never by index: NVML has its own order."""
    every = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    by_address = {(p.domain, p.bus, p.device): h for h, p in zip(every, map(nvml.nvmlDeviceGetPciInfo, every))}
    handles = []
    for index in cuda_indices:
        where = address(index)
        if where not in by_address:
            return [], (f"no NVML device at the PCI address of cuda:{index} ({where[0]:04x}:{where[1]:02x}:"
                        f"{where[2]:02x}; a MIG slice or a container?): not sampled")
        handles.append(by_address[where])
    return handles, "pci"


class NvmlSampler:
    """Samples CUDA devices ``indices`` every ``interval_s`` seconds between ``start()`` and ``stop()`` through
    ``nvml`` (default nvidia-ml-py); ``summary()``: its columns (docs/REFERENCE.md)."""

    def __init__(self, indices: list[int], interval_s: float = 0.1, nvml=None):
        self.indices, self.interval_s, self.nvml = list(indices), interval_s, nvml or pynvml
        self.util, self.mem_mib, self.power_w, self.handles = [], [], [], []
        self.gpu_name = self.energy_problem = None  # energy_problem: why there is no energy, where there is none
        self.energy_mj: list[int] | None = None  # each GPU's counter at start() (mJ)
        self.energy_j: float | None = None  # summed over GPUs, start() to stop() (J)
        self._stop, self._thread = threading.Event(), None
        if not self.indices or self.nvml is None:
            self.how = "nvidia-ml-py does not import here" if self.indices else "no GPU in this run"
            return
        try:
            self.nvml.nvmlInit()
            self.handles, self.how = match_handles(self.indices, self.nvml)
            if self.handles:
                name = self.nvml.nvmlDeviceGetName(self.handles[0])
                self.gpu_name = name.decode() if isinstance(name, bytes) else name
        except Exception as e:  # pynvml.NVMLError and friends: no usable NVML here
            self.handles, self.how = [], f"NVML unusable: {e}"

    @property
    def available(self) -> bool:
        return bool(self.handles)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            power = []
            try:
                util = [self.nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self.handles]
                mem = [self.nvml.nvmlDeviceGetMemoryInfo(h).used / 2**20 for h in self.handles]
                for h in self.handles:
                    with contextlib.suppress(Exception):  # a GPU without a power reading
                        power.append(self.nvml.nvmlDeviceGetPowerUsage(h) / 1e3)  # mW -> W
            except Exception:
                return
            self.util.append(util)
            self.mem_mib.append(max(mem))
            if power:
                self.power_w.append(sum(power))

    def read_energy_mj(self) -> list[int] | None:
        """Each GPU's total-energy counter (mJ); None, why in ``energy_problem``, where one cannot be read."""
        try:
            return [int(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self.handles]
        except Exception as e:  # pynvml.NVMLError_NotSupported and friends
            self.energy_problem = f"no energy counter ({e})"
            return None

    def start(self) -> NvmlSampler:
        if self.available:
            self.energy_mj = self.read_energy_mj()
            self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
            self._thread.start()
        return self

    __enter__ = start

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self.available:
            end_mj = self.read_energy_mj()
            if self.energy_mj is not None and end_mj is not None:  # J over all GPUs, unless a counter went back
                if any(e < s for s, e in zip(self.energy_mj, end_mj)):
                    self.energy_problem = "the energy counter went backwards (driver reloaded?)"
                else:
                    self.energy_j = sum(e - s for s, e in zip(self.energy_mj, end_mj)) / 1e3  # mJ -> J
            with contextlib.suppress(Exception):
                self.nvml.nvmlShutdown()
            self.handles = []

    def summary(self, output_tokens: int | None = None) -> dict:
        """The ``gpu_*`` columns, ``j_per_output_token`` (of ``output_tokens``) and ``nvml``."""
        util = np.asarray(self.util, dtype=np.float64)
        by_gpu = ";".join(f"{v:.1f}" for v in util.mean(axis=0)) if util.size else None
        return {"gpu_util_pct_mean": float(util.mean()) if util.size else None,
                "gpu_util_pct_max": float(util.max()) if util.size else None, "gpu_util_pct_by_gpu": by_gpu,
                "gpu_mem_used_mib_max": float(max(self.mem_mib)) if self.mem_mib else None,
                "gpu_power_w_mean": float(np.mean(self.power_w)) if self.power_w else None, "gpu_name": self.gpu_name,
                "gpu_energy_j": self.energy_j, **energy_per_token(self.energy_j, output_tokens),
                "nvml": f"{self.how}; {self.energy_problem}" if self.energy_problem else self.how}
