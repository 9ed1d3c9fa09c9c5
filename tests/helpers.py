"""What several test modules share: the tiny checkpoint shape, transformers' greedy reference, prompts, the
harness run as a user runs it, and process helpers. Test modules import from here, never from each other."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time

import numpy as np
import torch

from backends.segments import exited  # noqa: F401  (the tests take it from here)

# Large initial weights so that greedy decoding of a random model depends on the whole context
# (with small ones the argmax just repeats the last token, and any bug would pass unnoticed).
TINY = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=32, vocab_size=1024, max_position_embeddings=1024, rope_theta=10000.0, initializer_range=0.3,
            rms_norm_eps=1e-6)


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


def biased_checkpoint(dest) -> str:
    """Qwen3 with ``attention_bias`` saved by transformers into ``dest``: q/k/v *and* o_proj get a bias (zero at
    init, so drawn here, std 0.3)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(3)
    model = Qwen3ForCausalLM(Qwen3Config(**TINY, attention_bias=True))
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            torch.nn.init.normal_(p, std=0.3)
    model.save_pretrained(dest)
    return str(dest)


def with_drawn_norms(src: str, dest: str, seed: int) -> str:
    """Checkpoint ``src`` saved by transformers into ``dest`` (once) with every RMSNorm weight drawn as ``1 + 0.3
    N(0, 1)``: transformers initialises them to ones, which hides a norm weight applied twice or not at all."""
    from transformers import Qwen3ForCausalLM

    if not os.path.exists(os.path.join(dest, "config.json")):
        model = Qwen3ForCausalLM.from_pretrained(src, dtype=torch.float32)
        gen = torch.Generator().manual_seed(seed)
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.data = 1 + 0.3 * torch.randn(param.shape, generator=gen)
        model.save_pretrained(dest, safe_serialization=True)
    return dest


def prompts_of_lengths(lengths, seed=0, vocab=1024):
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(n)] for n in lengths]


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def harness(*overrides, cache, timeout=300):
    env = {**os.environ, "TPCP_CACHE": cache, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "harness", *overrides], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def run_interpreted(code: str) -> str:
    """``code`` run by Triton's interpreter on the CPU (``TRITON_INTERPRET=1`` is read when a kernel is defined, so
    in a fresh process); returns what it printed. Raises AssertionError with its stderr when it fails."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def orphaned_workers() -> set[int]:
    """Spawned processes whose parent is gone (re-parented to init): what a crashed run would leave."""
    out = subprocess.run(["ps", "-eo", "pid,ppid,args"], capture_output=True, text=True).stdout
    return {int(line.split()[0]) for line in out.splitlines()[1:]
            if "multiprocessing.spawn" in line and line.split()[1] == "1"}


def children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid and fields[0] != "Z":
                    out.append(int(entry))
            except (OSError, IndexError):
                pass
    return out


def spawned_workers(pid: int) -> list[int]:
    """Live children of ``pid`` that multiprocessing spawned (its workers); one that exits while being read is
    left out (a child of the moment may end between the listing and the read)."""
    out = []
    for child in children(pid):
        try:
            with open(f"/proc/{child}/cmdline") as f:
                if "spawn_main" in f.read():
                    out.append(child)
        except OSError:
            pass
    return out


def wait_until(predicate, timeout: float, what: str) -> float:
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.05)
    return time.monotonic() - start


def vllm_metrics(records, duration, slo):
    """vLLM's calculate_metrics (benchmarks/serve.py), written out again from per-request records
    (``harness/workloads.py``'s JSONL lines): goodput counts a request meeting every bound in ``slo`` (ms), a
    one-token request's TPOT being 0; duration in s; the 1 s peaks from the first send."""
    ttfts = [r["ttft_ms"] for r in records]
    tpots = [(r["e2el_ms"] - r["ttft_ms"]) / (r["output_len"] - 1) for r in records if r["output_len"] > 1]
    itls = [x for r in records for x in r["itl_ms"]]
    good = 0
    for r in records:
        tpot = (r["e2el_ms"] - r["ttft_ms"]) / (r["output_len"] - 1) if r["output_len"] > 1 else 0.0
        values = {"ttft_ms": r["ttft_ms"], "tpot_ms": tpot, "e2el_ms": r["e2el_ms"]}
        good += all(values[k] <= v for k, v in slo.items())
    out = {"goodput_req_s": good / duration, "req_s": len(records) / duration}
    e2els = [r["e2el_ms"] for r in records]
    # the peaks as vLLM writes them: 1 s buckets from the first send, times in s
    start = min(r["sent_s"] for r in records)
    seconds = int(np.ceil(max(r["sent_s"] + r["e2el_ms"] / 1e3 for r in records) - start)) + 1
    tokens_per_second, concurrent = np.zeros(seconds), np.zeros(seconds)
    for r in records:
        current = r["sent_s"] + r["ttft_ms"] / 1e3
        times = [current]
        for itl in r["itl_ms"]:
            current += itl / 1e3
            times.append(current)
        for t in times:
            tokens_per_second[int(t - start)] += 1
        for second in range(int(r["sent_s"] - start), int(r["sent_s"] + r["e2el_ms"] / 1e3 - start) + 1):
            concurrent[second] += 1
    out.update(peak_output_tok_s=float(tokens_per_second.max()), peak_concurrent_requests=int(concurrent.max()))
    for name, v in (("ttft_ms", ttfts), ("tpot_ms", tpots), ("itl_ms", itls), ("e2el_ms", e2els)):
        out.update({f"{name}_mean": np.mean(v), f"{name}_p50": np.median(v), f"{name}_std": np.std(v),
                    f"{name}_p99": np.percentile(v, 99)})
    return out
