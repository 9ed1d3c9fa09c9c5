"""Run metadata for the results row: UTC time, git commit, library versions, host."""

from __future__ import annotations

import datetime
import os
import platform
import socket
import subprocess

import torch


def git_commit(repo_dir: str) -> str | None:
    """``$TPCP_GIT_COMMIT`` when set (a copy of the tree on a remote GPU machine, whose .git may lag);
    else the short commit of ``repo_dir`` with ``-dirty`` when the tree has changes; else None."""
    if os.environ.get("TPCP_GIT_COMMIT"):
        return os.environ["TPCP_GIT_COMMIT"]
    if not os.path.isdir(os.path.join(repo_dir, ".git")):
        return None
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=repo_dir, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        if not sha:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo_dir,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def metadata() -> dict:
    nccl = None
    if torch.cuda.is_available():
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:
            nccl = None
    return {
        "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        "torch_version": torch.__version__, "cuda_version": torch.version.cuda, "nccl_version": nccl,
        "host": socket.gethostname(), "python_version": platform.python_version(),
    }
