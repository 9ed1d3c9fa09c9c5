"""Run metadata for the results row: git commit, library and driver versions, host, CPU model and cores, load."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import socket
import subprocess

import torch

from .nvml_sampler import pynvml


def git_commit(repo_dir: str) -> str | None:
    """``$TPCP_GIT_COMMIT`` when set; else the short commit of ``repo_dir`` (``-dirty``: tracked files changed)."""
    if os.environ.get("TPCP_GIT_COMMIT"):
        return os.environ["TPCP_GIT_COMMIT"]
    if not os.path.isdir(os.path.join(repo_dir, ".git")):
        return None

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo_dir, capture_output=True, text=True, timeout=10).stdout.strip()

    try:
        sha = git("rev-parse", "--short=12", "HEAD")
        return sha + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "") if sha else None
    except (OSError, subprocess.SubprocessError):
        return None


def cpu_model() -> str | None:
    """The CPU's model name (/proc/cpuinfo), else ``platform.processor()``."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or None


def package_version(*names: str) -> str | None:
    """The version of the first of the distributions ``names`` that is installed (nothing imported), else None."""
    for name in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(name)
    return None


def driver_version(nvml=None) -> str | None:
    """The NVIDIA driver's version from ``nvml`` (default nvidia-ml-py); None where NVML is missing or unusable."""
    nvml = nvml or pynvml
    with contextlib.suppress(Exception):  # pynvml.NVMLError: no driver here; AttributeError: no nvidia-ml-py (None)
        nvml.nvmlInit()
        try:
            version = nvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        finally:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
    return None


def metadata(device: str = "cpu") -> dict:
    """Provenance columns of a row: versions (the driver's on CUDA runs), commit, host; on CPU the load."""
    nccl = None
    if torch.cuda.is_available():
        with contextlib.suppress(Exception):
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
    out = {"git_commit": git_commit(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
           "torch_version": torch.__version__, "cuda_version": torch.version.cuda, "nccl_version": nccl,
           "driver_version": driver_version() if device == "cuda" else None,
           "transformers_version": package_version("transformers"),
           "triton_version": package_version("triton", "pytorch-triton", "pytorch-triton-rocm"),
           "host": socket.gethostname(), "python_version": platform.python_version(),
           "cpu_model": cpu_model(), "cpu_cores": os.cpu_count()}
    if device == "cpu":
        out["load_avg_1m"] = os.getloadavg()[0]
    return out


def hydra_dir() -> str | None:
    """This job's Hydra output directory (None outside Hydra)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return HydraConfig.get().runtime.output_dir
    except Exception:
        return None
