"""What every run records beside its timings: the GPUs' energy from NVML's counter (a fake NVML here), empty
cells with the reason on CPU; the versions of what ran (driver, transformers, Triton)."""

from __future__ import annotations

import importlib.metadata
from types import SimpleNamespace

import pynvml
import pytest

from harness import nvml_sampler, sysinfo
from harness.metrics import energy_per_token
from harness.nvml_sampler import NvmlSampler
from harness.report import gpu_lines, print_summary


class EnergyNvml:
    """NVML with GPUs at PCI buses 0x1a, 0x1b whose total-energy counters (mJ) read ``readings[i]`` at the
    i-th read of each GPU; ``supported=False``: the counter raises NVML_ERROR_NOT_SUPPORTED (pre-Volta)."""

    def __init__(self, readings, supported: bool = True):
        self.readings, self.supported = readings, supported
        self.reads = {0: 0, 1: 0}

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetPciInfo(self, handle):
        return SimpleNamespace(domain=0, bus=0x1A + handle, device=0)

    def nvmlDeviceGetName(self, handle):
        return b"Fake H200"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if not self.supported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        value = self.readings[self.reads[handle]][handle]
        self.reads[handle] += 1
        return value


@pytest.fixture
def two_gpus(monkeypatch):
    """cuda:0 and cuda:1 at the fake's PCI addresses (no CUDA needed)."""
    real = nvml_sampler.match_handles
    monkeypatch.setattr(nvml_sampler, "match_handles",
                        lambda indices, nvml: real(indices, nvml, address=lambda i: (0, 0x1A + i, 0)))


def run_sampler(nvml) -> dict:
    sampler = NvmlSampler([0, 1], interval_s=60, nvml=nvml)  # no utilisation sample within the test
    sampler.start()
    sampler.stop()
    return sampler.summary()


def test_energy_is_the_counters_difference_summed_over_the_gpus(two_gpus):
    """mJ at stop minus mJ at start, per GPU, summed, in J; per output token it divides by the tokens."""
    nvml = EnergyNvml([(1_000_000, 5_000_000), (1_150_000, 5_250_500)])
    gpu = run_sampler(nvml)
    assert gpu["gpu_energy_j"] == pytest.approx(150.0 + 250.5) and gpu["nvml"] == "pci"
    assert nvml.reads == {0: 2, 1: 2}  # read once before and once after the run
    assert energy_per_token(gpu["gpu_energy_j"], 801)["j_per_output_token"] == pytest.approx(0.5)


def test_a_gpu_without_the_counter_leaves_the_energy_empty_and_says_why(two_gpus):
    gpu = run_sampler(EnergyNvml([], supported=False))
    assert gpu["gpu_energy_j"] is None and gpu["nvml"] == "pci; no energy counter (Not Supported)"
    assert energy_per_token(gpu["gpu_energy_j"], 100)["j_per_output_token"] is None


def test_a_counter_that_goes_backwards_is_not_a_negative_energy(two_gpus):
    gpu = run_sampler(EnergyNvml([(9_000, 9_000), (1_000, 9_500)]))
    assert gpu["gpu_energy_j"] is None and "went backwards" in gpu["nvml"]


def test_on_cpu_the_energy_cells_are_empty_and_nvml_says_why():
    sampler = NvmlSampler([], nvml=EnergyNvml([]))  # no CUDA device in the run
    sampler.start()
    sampler.stop()
    gpu = sampler.summary()
    assert gpu["gpu_energy_j"] is None and gpu["nvml"] == "no GPU in this run"
    assert energy_per_token(None, 599) == {"j_per_output_token": None}
    assert energy_per_token(12.0, 0) == {"j_per_output_token": None}  # no token: no ratio, not a division error


def test_the_gpu_line_carries_the_energy_when_there_is_one(capsys):
    row = {"status": "ok", "engine": "tp", "control": "shm", "tp": 2, "model": "qwen3-0.6b", "device": "cuda",
           "output_tok_s": 1.0, "total_tok_s": 2.0, "req_s": 1.0, "output_tokens": 801, "duration_s": 1.0,
           "gpu_util_pct_mean": 97.3, "gpu_util_pct_max": 100.0, "gpu_mem_used_mib_max": 80123.0,
           "gpu_power_w_mean": 650.2, "gpu_energy_j": 400.5, "j_per_output_token": 0.5, "nvml": "pci"}
    print_summary(row, "/tmp/x/runs.csv")
    lines = capsys.readouterr().out.splitlines()
    assert "  GPU         busy 97.3% of the time on average (max 100.0%), 80123 MiB at most, 650.2 W" in lines
    assert " " * 14 + "400.5 J over the timed run, 0.5000 J per output token" in lines
    assert max(len(line) for line in lines) <= 120
    assert gpu_lines({**row, "gpu_energy_j": None, "j_per_output_token": None})[-1].endswith("650.2 W")
    assert gpu_lines({"nvml": "no GPU in this run"}) == ["  GPU         not measured: no GPU in this run"]


class DriverNvml:
    """NVML that reports driver ``version`` (bytes, as older nvidia-ml-py returns it), or fails to start."""

    def __init__(self, version=b"570.124.06", starts: bool = True):
        self.version, self.starts, self.shut = version, starts, False

    def nvmlInit(self):
        if not self.starts:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    def nvmlSystemGetDriverVersion(self):
        return self.version

    def nvmlShutdown(self):
        self.shut = True


def test_the_driver_version_comes_from_nvml_and_is_empty_without_a_driver():
    nvml = DriverNvml()
    assert sysinfo.driver_version(nvml) == "570.124.06" and nvml.shut
    assert sysinfo.driver_version(DriverNvml("580.65")) == "580.65"
    assert sysinfo.driver_version(DriverNvml(starts=False)) is None


def installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def test_a_row_names_the_versions_of_what_ran(monkeypatch):
    """transformers and Triton as installed (empty where not), the driver only on a CUDA run."""
    row = sysinfo.metadata("cpu")
    assert row["driver_version"] is None and row["transformers_version"] == installed("transformers")
    assert row["triton_version"] == (installed("triton") or installed("pytorch-triton")
                                     or installed("pytorch-triton-rocm"))
    assert sysinfo.package_version("no-such-package-tpcp") is None
    assert sysinfo.package_version("no-such-package-tpcp", "transformers") == installed("transformers")
    monkeypatch.setattr(sysinfo, "driver_version", lambda: "570.124.06")
    assert sysinfo.metadata("cuda")["driver_version"] == "570.124.06"
