"""GPU utilisation, memory and power sampled by a background thread through NVML (nvidia-ml-py).

Where NVML is missing (no driver, CPU machine) the sampler is inert and every value is None: a
benchmark on a CPU machine gets empty cells, never a crash.
"""

from __future__ import annotations

import threading

import numpy as np

try:
    import pynvml
except ImportError:  # nvidia-ml-py not installed
    pynvml = None


class NvmlSampler:
    """Samples GPUs ``indices`` every ``interval_s`` seconds between ``start()`` and ``stop()``.

    ``summary()`` gives ``gpu_util_pct_mean`` / ``gpu_util_pct_max`` (SM busy %, nvmlDeviceGetUtilizationRates,
    over all sampled GPUs), ``gpu_util_pct_by_gpu`` (each GPU's mean, ";"-separated, in index order), ``gpu_mem_used_mib_max`` (device memory in use, MiB, the largest of any GPU)
    and ``gpu_power_w_mean`` (board power, W, summed over GPUs, averaged over samples); ``gpu_name``.
    """

    def __init__(self, indices: list[int], interval_s: float = 0.1):
        self.indices, self.interval_s = list(indices), interval_s
        self.util, self.mem_mib, self.power_w = [], [], []
        self.gpu_name = None
        self.handles = []
        self._stop = threading.Event()
        self._thread = None
        if pynvml is None or not self.indices:
            return
        try:
            pynvml.nvmlInit()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices]
            name = pynvml.nvmlDeviceGetName(self.handles[0])
            self.gpu_name = name.decode() if isinstance(name, bytes) else name
        except Exception:  # pynvml.NVMLError and friends: no usable NVML here
            self.handles = []

    @property
    def available(self) -> bool:
        return bool(self.handles)

    def _sample_once(self) -> None:
        util, mem, power = [], [], []
        for h in self.handles:
            util.append(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
            mem.append(pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**20)
            try:
                power.append(pynvml.nvmlDeviceGetPowerUsage(h) / 1e3)  # mW -> W
            except Exception:
                pass
        self.util.append(util)
        self.mem_mib.append(max(mem))
        if power:
            self.power_w.append(sum(power))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._sample_once()
            except Exception:
                return

    def start(self) -> "NvmlSampler":
        if self.available:
            self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self.available:
            try:
                pynvml.nvmlShutdown()
            except Exception:
                pass
            self.handles = []

    def summary(self) -> dict:
        util = np.asarray(self.util, dtype=np.float64)
        return {
            "gpu_util_pct_mean": float(util.mean()) if util.size else None,
            "gpu_util_pct_max": float(util.max()) if util.size else None,
            "gpu_util_pct_by_gpu": ";".join(f"{v:.1f}" for v in util.mean(axis=0)) if util.size else None,
            "gpu_mem_used_mib_max": float(max(self.mem_mib)) if self.mem_mib else None,
            "gpu_power_w_mean": float(np.mean(self.power_w)) if self.power_w else None,
        }
