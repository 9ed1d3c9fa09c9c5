"""Shared fixtures: tiny Qwen3 checkpoints written by transformers, and transformers' greedy reference."""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess
import sys

import pytest
from helpers import TINY

from harness.checkpoint import materialize


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def tiny_untied(model_cache) -> str:
    return materialize("tiny-untied", {**TINY, "tie_word_embeddings": False}, seed=0, root=model_cache)


@pytest.fixture(scope="session")
def tiny_tied(model_cache) -> str:
    return materialize("tiny-tied", {**TINY, "tie_word_embeddings": True}, seed=1, root=model_cache)


def _creator_gone_or_me(name: str) -> bool:
    """Segments are named tpcp_<creator pid>_<random>: ours, or left by a process that no longer exists."""
    try:
        pid = int(name.split("_")[1])
    except (IndexError, ValueError):
        return False
    return pid == os.getpid() or not os.path.exists(f"/proc/{pid}")


@pytest.fixture(autouse=True)
def _no_leaks():
    """Every test must leave /dev/shm as it found it: no control-plane segment of this test behind (segments
    of other live processes on the host, e.g. a concurrent run, are not ours to judge)."""
    before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    yield
    after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    leaked = sorted(n for n in after - before if n.startswith("tpcp_") and _creator_gone_or_me(n))
    assert not leaked, f"shared-memory segments left behind: {leaked}"


@pytest.fixture(autouse=True)
def _fast_lane_starts_no_python(request, monkeypatch):
    """The slow marker's definition, kept by a check rather than by memory: a CPU test outside the slow lane starts
    no Python process (a worker, the harness, a script); git and other tools are fine. GPU tests are their own lane."""
    if request.node.get_closest_marker("slow") or request.node.get_closest_marker("gpu"):
        return
    refusal = f"{request.node.nodeid} starts a Python process: mark it slow (pyproject.toml's markers)"

    def no_process(*args, **kwargs):
        raise AssertionError(refusal)

    def popen(self, args, *rest, **kwargs):
        if "python" in str(args) or sys.executable in str(args):
            raise AssertionError(refusal)
        popen_init(self, args, *rest, **kwargs)

    popen_init = subprocess.Popen.__init__
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", no_process)
    monkeypatch.setattr(subprocess.Popen, "__init__", popen)


@pytest.fixture(autouse=True, scope="session")
def _no_stray_processes():
    """The whole suite must leave the process table as it found it: no spawned worker of ours alive."""
    yield
    import time

    def workers():
        out = []
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                    with open(f"/proc/{pid}/cmdline") as f:
                        cmd = f.read()
                except (OSError, IndexError, ValueError):
                    continue
                if ppid == os.getpid() and "spawn_main" in cmd:
                    out.append(pid)
        return out

    deadline = time.monotonic() + 10
    while workers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not workers(), f"worker processes left behind: {workers()}"
