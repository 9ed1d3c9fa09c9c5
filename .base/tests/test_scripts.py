"""The device scripts under ``scripts/`` on a machine they cannot use: one line on stderr and exit 2, before any
step (session 15's new-user trial: ``control_cost.sh`` drew a 1.2 GB preset, ran 8 failing jobs and was then
killed by the OOM killer drawing the 8B one; others exited 0 after tracebacks); a script given nothing to do
prints its usage, exit 2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
GPU_SCRIPTS = {"ab_one_gpu.sh": 1, "bench_one_gpu.sh": 1, "decode_tile_ab.sh": 1, "serve_ladder.sh": 1,
               "control_cost.sh": 2, "gemm_ab.sh": 2, "multi_gpu_sweep.sh": 2, "tp_scaling_check.sh": 2}
# every Python script that asks for CUDA (gpu_only.py defines the asking)
PY_GPU_SCRIPTS = sorted(p.name for p in (ROOT / "scripts").glob("*.py")
                        if "require_cuda(" in p.read_text() and p.name != "gpu_only.py")


def run(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"  # python3: this interpreter's
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": path, "OUT": str(tmp_path)})


def test_every_shell_script_is_listed():
    """A new script sourcing device_env.sh says here whether it needs GPUs."""
    cpu = {"broadcast_latency.sh", "serve_host.sh", "sim_nodes.sh", "device_env.sh"}
    assert {p.name for p in (ROOT / "scripts").glob("*.sh")} == set(GPU_SCRIPTS) | cpu


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("script", sorted(GPU_SCRIPTS))
def test_a_gpu_script_without_a_gpu_says_so_in_one_line(script, tmp_path):
    res = run(["bash", f"scripts/{script}"], tmp_path)
    needs = GPU_SCRIPTS[script]
    assert res.returncode == 2, (res.stdout[-500:], res.stderr[-500:])
    assert res.stderr.strip() == f"error: {script} needs {needs} CUDA GPU(s) and this machine has 0 (run it on the " \
        f"device machine)" and not res.stdout
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("script", PY_GPU_SCRIPTS)
def test_a_python_gpu_script_without_a_gpu_says_so_in_one_line(script, tmp_path):
    res = run([sys.executable, f"scripts/{script}"], tmp_path)
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0, res.stderr[-500:]
    assert "has no CUDA GPU" in res.stderr


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["bash", "scripts/sim_nodes.sh"], [sys.executable, "scripts/broadcast_table.py"]])
def test_a_script_given_nothing_to_do_prints_its_usage(argv, tmp_path):
    res = run(argv, tmp_path)
    assert res.returncode == 2 and res.stderr.startswith("usage: ") and res.stderr.count("\n") == 1, res.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs CUDA's compiler (no GPU)")
@pytest.mark.parametrize("source", sorted(p.name for p in (ROOT / "scripts").glob("*.cu")))
def test_a_cuda_source_builds_for_hopper_without_spills(source, tmp_path):
    """The CUDA C++ a device script builds there (NVRTC through CuPy) also builds here, so that a device call is
    not spent on a typo; ptxas's report: no spill, no stack frame."""
    res = subprocess.run(["nvcc", "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v", "-o",
                          str(tmp_path / "k.cubin"), f"scripts/{source}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    frames = [line.strip() for line in res.stderr.splitlines() if "stack frame" in line]
    assert frames and all(f == "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" for f in frames), frames
