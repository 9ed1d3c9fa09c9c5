"""The device scripts under ``scripts/`` on a machine they cannot use: one line on stderr and exit 2, before any
step (session 15's new-user trial: ``control_cost.sh`` drew a 1.2 GB preset, ran 8 failing jobs and was then
killed by the OOM killer drawing the 8B one; others exited 0 after tracebacks); a script given nothing to do
prints its usage, exit 2."""

from __future__ import annotations

import ast
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
# those that refuse at import, before argparse (they import Triton next)
REFUSE_FIRST = [s for s in PY_GPU_SCRIPTS
                if 'if __name__ == "__main__":\n    require_cuda()' in (ROOT / "scripts" / s).read_text()]


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
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("script", REFUSE_FIRST)
def test_a_gpu_script_refusing_before_argparse_gives_its_docstring_for_help(script, tmp_path):
    """``--help`` works where the script cannot run (the others reach argparse before they refuse)."""
    res = run([sys.executable, f"scripts/{script}", "--help"], tmp_path)
    assert res.returncode == 0 and not res.stderr.strip(), res.stderr[-500:]
    doc = ast.get_docstring(ast.parse((ROOT / "scripts" / script).read_text()))
    assert res.stdout.startswith(doc.strip()[:60]) and f"{script} measures CUDA kernels" in res.stdout


BAD_INPUT = [  # (environment, argv): session 42's new-user trial found each of these ran, or printed a traceback
    ({}, ["bash", "scripts/sim_nodes.sh"]), ({}, ["bash", "scripts/sim_nodes.sh", "--bogus"]),
    ({"NODES": "x"}, ["bash", "scripts/sim_nodes.sh", "-m", "harness"]),
    ({}, ["bash", "scripts/sim_nodes.sh", "-m", "harness", "tp=abc"]),
    ({}, ["bash", "scripts/broadcast_latency.sh", "--bogus"]), ({}, ["bash", "scripts/serve_host.sh", "tp=abc"]),
    # session 47's trial: a bad later value of a list, or REPEAT, ran the sweep's steps and said so only on stdout
    ({"PAYLOADS": "step", "CONTROLS": "shm,bogus", "TPS": "2"}, ["bash", "scripts/broadcast_latency.sh"]),
    ({"PAYLOADS": "step", "TPS": "2", "REPEAT": "x"}, ["bash", "scripts/broadcast_latency.sh"]),
    ({"LIMIT": "abc"}, ["bash", "scripts/broadcast_latency.sh"]),
    ({}, [sys.executable, "scripts/broadcast_table.py"]), ({}, [sys.executable, "scripts/broadcast_table.py", "x.csv"]),
    ({}, [sys.executable, "scripts/ring_cpu_cost.py", "abc"]),
    ({}, [sys.executable, "scripts/step_encoding_cost.py", "--nope"]), ({}, [sys.executable, "scripts/gpu_only.py"]),
    ({}, [sys.executable, "scripts/norm_chain.py", "--layers", "-5"]),  # session 43's trial: checked before CUDA
    ({}, [sys.executable, "scripts/norm_chain.py", "--replays", "0"])]


@pytest.mark.slow
@pytest.mark.parametrize("env, argv", BAD_INPUT)
def test_a_script_given_bad_input_says_so_in_one_line_and_starts_nothing(env, argv, tmp_path, monkeypatch):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    before = set(Path("/tmp").glob("sim_nodes.*"))
    res = run(argv, tmp_path)
    assert res.returncode == 2 and res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr
    assert not res.stdout and not any(tmp_path.iterdir()) and set(Path("/tmp").glob("sim_nodes.*")) == before


def test_every_python_script_reads_its_command_line_through_one_line_parser():
    """A script reading ``sys.argv`` itself printed a traceback on a bad value (session 42)."""
    loose = [p.name for p in (ROOT / "scripts").glob("*.py")
             if p.name != "gpu_only.py" and "OneLineParser(" not in p.read_text()]
    assert not loose


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


def test_profile_steps_splits_the_critical_path_into_a_layers_stages(monkeypatch):
    """Kernels launched early (PDL) overlap: each stage counts only what it adds after the one before ends; idle
    gaps count apart; the layer pattern is found whatever kernel the step starts with."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import profile_steps

    spans, t = [], 0.0
    for _ in range(2):  # 2 steps: embed, 3 layers of A (starts 1 us early), B (0.5 us idle first), C; head
        spans.append(("embed", t, t + 2))
        t += 2
        for _ in range(3):
            spans += [("A", t - 1, t + 3), ("B", t + 3.5, t + 6), ("C", t + 4, t + 7)]
            t += 7
        spans.append(("head", t, t + 5))
        t += 15
    text = profile_steps.by_stage(profile_steps.exposed(spans), 2)
    assert "26.5 us a step exposed, 6.5 idle; 3 repeats (layers) of 3 kernels" in text
    assert [line.split()[-2] for line in text.splitlines()[1:4]] == ["3.00", "2.50", "1.00"]
    assert "one layer 6.50 us; before the repeats 2.0 us (1 kernels), after 5.0 us (1 kernels)" in text
    first_differs = [("A0" if i in (1, 12) else name, a, b) for i, (name, a, b) in enumerate(spans)]
    text = profile_steps.by_stage(profile_steps.exposed(first_differs), 2)  # layer 0 runs another first kernel
    assert "2 repeats (layers) of 3 kernels" in text and "one layer 6.50 us" in text
    spans.append(("head", t, t + 1))  # a step with one kernel more: no pattern to average
    assert "ran different kernels" in profile_steps.by_stage(profile_steps.exposed(spans), 2)
    for rows, steps in (([], 2), ([("k", 0.0, 1.0), ("k", 2.0, 3.0)], 2)):  # nothing repeats: says so, ends
        assert "no kernel pattern repeats" in profile_steps.by_stage(profile_steps.exposed(rows), steps)


@pytest.mark.slow
def test_in_tree_runs_a_command_on_that_trees_code_and_commit(tmp_path):
    """device_env.sh's PYTHONPATH names this checkout: a command run in a .base tree through ``in_tree`` imports
    the .base's engine and reports its commit (session 44's call 116 profiled this tree's engine twice)."""
    base = tmp_path / "base"
    for d in ("engine", "scripts"):
        (base / d).mkdir(parents=True)
    (base / "engine" / "__init__.py").write_text("")
    (base / ".commit").write_text("b" * 40 + "\n")
    probe = "import engine, os; print(os.path.dirname(engine.__file__), os.environ['TPCP_GIT_COMMIT'])"
    (base / "scripts" / "probe.py").write_text(probe)  # as scripts/*.py: sys.path[0] is scripts/, not the tree
    res = run(["bash", "-c", f'source scripts/device_env.sh; in_tree "{base}" python3 scripts/probe.py; '
               f'python3 -c "{probe}"'], tmp_path / "out")
    assert res.returncode == 0, res.stderr[-500:]
    there, here = res.stdout.split("\n")[:2]
    assert there == f"{base / 'engine'} {'b' * 40}"
    assert here.startswith(str(ROOT / "engine"))


@pytest.mark.slow
def test_broadcast_latency_runs_its_documented_step_sweep_on_cpu(tmp_path):
    """Session 47's docs audit: the script checked one job at the default tp=1, which workload=broadcast refuses, so
    every documented command exited 2. Its CPU sweep (RING.md's), made small, now runs through to its tables."""
    env = {"OUT": str(tmp_path), "PAYLOADS": "step", "CONTROLS": "shm", "TPS": "2", "REPEAT": "1", "MESSAGES": "60"}
    res = subprocess.run(["bash", "scripts/broadcast_latency.sh"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env={**os.environ, **env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                                           f"{os.environ.get('PATH', '')}"})
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rows = (tmp_path / "broadcast.csv").read_text().splitlines()
    assert len(rows) == 3 and "| decode-256 |" in (tmp_path / "table.md").read_text()  # header, 2 payloads
