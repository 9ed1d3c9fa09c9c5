"""Shared fixtures: tiny Qwen3 checkpoints written by transformers, and transformers' greedy reference."""

from __future__ import annotations

import os

import pytest
import torch

from harness.checkpoint import materialize

# Large initial weights so that greedy decoding of a random model depends on the whole context
# (with small ones the argmax just repeats the last token, and any bug would pass unnoticed).
TINY = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=32, vocab_size=1024, max_position_embeddings=1024, rope_theta=10000.0, initializer_range=0.3,
            rms_norm_eps=1e-6)


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def tiny_untied(model_cache) -> str:
    return materialize("tiny-untied", {**TINY, "tie_word_embeddings": False}, seed=0, root=model_cache)


@pytest.fixture(scope="session")
def tiny_tied(model_cache) -> str:
    return materialize("tiny-tied", {**TINY, "tie_word_embeddings": True}, seed=1, root=model_cache)


def hf_greedy(path: str, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """transformers' own greedy generate, float32, one prompt at a time (no padding)."""
    from transformers import Qwen3ForCausalLM

    model = Qwen3ForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    out = []
    for p in prompts:
        ids = model.generate(torch.tensor([p]), max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                             do_sample=False, pad_token_id=0)
        out.append(ids[0, len(p):].tolist())
    return out


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
