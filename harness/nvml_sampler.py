"""GPU utilisation, memory and power sampled by a background thread through NVML, and the energy from NVML's
counter. CUDA devices are matched to NVML handles by PCI address, never by index (NVML has its own order)."""

from __future__ import annotations

import contextlib
import threading

import numpy as np

try:
    import pynvml
except ImportError:  # nvidia-ml-py not installed
    pynvml = None


def pci_address(cuda_index: int) -> tuple[int, int, int]:
    """(domain, bus, device) of CUDA device ``cuda_index`` (as numbered after CUDA_VISIBLE_DEVICES)."""
    import torch

    p = torch.cuda.get_device_properties(cuda_index)
    return p.pci_domain_id, p.pci_bus_id, p.pci_device_id


def match_handles(cuda_indices: list[int], nvml, address=pci_address) -> tuple[list, str]:
    """(NVML handles of the CUDA devices ``cuda_indices`` by PCI address, "pci"); ([], why) when one has none."""
    by_address = {}
    for h in map(nvml.nvmlDeviceGetHandleByIndex, range(nvml.nvmlDeviceGetCount())):
        info = nvml.nvmlDeviceGetPciInfo(h)
        by_address[(info.domain, info.bus, info.device)] = h
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
    ``nvml`` (default nvidia-ml-py); ``summary()``: the ``gpu_*`` and ``nvml`` columns (docs/REFERENCE.md)."""

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

    def summary(self) -> dict:
        util = np.asarray(self.util, dtype=np.float64)
        by_gpu = ";".join(f"{v:.1f}" for v in util.mean(axis=0)) if util.size else None
        return {"gpu_util_pct_mean": float(util.mean()) if util.size else None,
                "gpu_util_pct_max": float(util.max()) if util.size else None, "gpu_util_pct_by_gpu": by_gpu,
                "gpu_mem_used_mib_max": float(max(self.mem_mib)) if self.mem_mib else None,
                "gpu_power_w_mean": float(np.mean(self.power_w)) if self.power_w else None,
                "gpu_energy_j": self.energy_j,
                "nvml": f"{self.how}; {self.energy_problem}" if self.energy_problem else self.how}
