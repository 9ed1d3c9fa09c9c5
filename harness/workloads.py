"""Workloads: the requests of one run, drawn reproducibly from the workload config and the seed."""

from __future__ import annotations

import random
from dataclasses import dataclass

from backends.validation import is_int, is_number
from engine import SamplingParams


@dataclass
class Workload:
    """prompts: token-id lists; params: one SamplingParams per prompt; warmup: run an untimed warm-up;
    iterations: how many times the timed run submits the whole batch (one generate call each)."""

    name: str
    prompts: list[list[int]]
    params: list[SamplingParams]
    warmup: bool
    iterations: int = 1

    @property
    def prompt_lens(self) -> list[int]:
        return [len(p) for p in self.prompts]


def random_requests(w: dict, seed: int, vocab_size: int) -> Workload:
    """nano-vllm's bench.py recipe: ``num_seqs`` prompts of uniform random token ids in
    ``[0, max_token_id]`` with lengths uniform in ``[min_input_len, max_input_len]``, each with
    ``max_tokens`` uniform in ``[min_output_len, max_output_len]`` and ignore_eos (every request produces
    exactly max_tokens tokens, so throughput does not depend on the model's weights)."""
    rng = random.Random(seed)
    top = min(w["max_token_id"], vocab_size - 1)
    # Draw order as in nano-vllm's bench.py (all prompts, then all output lengths), so seed 0 gives its
    # exact requests: 133,966 output tokens at the full size.
    prompts = [[rng.randint(0, top) for _ in range(rng.randint(w["min_input_len"], w["max_input_len"]))]
               for _ in range(w["num_seqs"])]
    params = [SamplingParams(temperature=w["temperature"], ignore_eos=w["ignore_eos"],
                             max_tokens=rng.randint(w["min_output_len"], w["max_output_len"]))
              for _ in range(w["num_seqs"])]
    return Workload(w["name"], prompts, params, bool(w.get("warmup", True)))


def fixed_requests(w: dict, seed: int, vocab_size: int) -> Workload:
    """``num_seqs`` prompts of exactly ``input_len`` random token ids, each generating exactly
    ``output_len`` tokens (greedy, ignore_eos), submitted ``iterations`` times: the latency-bound case
    (batch 1 or 8 decode) where per-step overheads such as the control plane weigh most."""
    rng = random.Random(seed)
    top = min(w["max_token_id"], vocab_size - 1)
    prompts = [[rng.randint(0, top) for _ in range(w["input_len"])] for _ in range(w["num_seqs"])]
    params = [SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=w["output_len"])] * w["num_seqs"]
    return Workload(w["name"], prompts, params, bool(w.get("warmup", True)), int(w.get("iterations", 1)))


# Per workload kind: the integer keys and their least allowed value.
INT_KEYS = {
    "random": {"num_seqs": 1, "min_input_len": 1, "max_input_len": 1, "min_output_len": 1, "max_output_len": 1,
               "max_token_id": 0},
    "fixed": {"num_seqs": 1, "input_len": 1, "output_len": 1, "max_token_id": 0, "iterations": 1},
    "broadcast": {"decode_context": 1, "warmup": 0, "messages": 1, "min_messages": 1, "max_bytes_per_payload": 1,
                  "kvcache_block_size": 1, "gap_us": 0},
}


# Per workload kind: every key it reads (a key outside it changes nothing the run does).
_COMMON = {"name", "kind", "warmup", "scale_on_cpu", "cpu"}
READ_KEYS = {
    "random": _COMMON | set(INT_KEYS["random"]) | {"temperature", "ignore_eos"},
    "fixed": _COMMON | set(INT_KEYS["fixed"]),  # greedy and ignore_eos always
    "broadcast": _COMMON | set(INT_KEYS["broadcast"]) | {"decode_batches", "prefill_batches", "raw_bytes"},
}


def unread_keys(w: dict) -> list[str]:
    """The keys of workload config ``w`` its kind does not read (``++workload.iterations=1`` on a random
    workload, say), sorted; [] for an unknown kind (``check_workload`` refuses that)."""
    return sorted(set(w) - READ_KEYS[w["kind"]]) if w.get("kind") in READ_KEYS else []


def check_workload(w: dict) -> None:
    """Raises ValueError naming the ``workload.`` key to fix: an unknown kind, a count or length that is
    not an integer or below its least value, a switch that is not true/false, a min above its max, a
    negative temperature, a broadcast payload list with a bad entry or no payload at all."""
    kind = w.get("kind")
    if kind not in INT_KEYS:
        raise ValueError(f"workload {w.get('name')!r}: unknown kind {kind!r} (random, fixed or broadcast)")
    for key, least in INT_KEYS[kind].items():
        v = w.get(key)
        if not is_int(v) or v < least:
            raise ValueError(f"workload.{key} must be an integer >= {least}, got {v!r}")
    for lo, hi in (("min_input_len", "max_input_len"), ("min_output_len", "max_output_len")):
        if kind == "random" and w[lo] > w[hi]:
            raise ValueError(f"workload.{lo}={w[lo]} is above workload.{hi}={w[hi]}")
    for key in ("warmup", "ignore_eos", "scale_on_cpu") if kind != "broadcast" else ():
        if key in w and not isinstance(w[key], bool):
            raise ValueError(f"workload.{key} must be true or false, got {w[key]!r}")
    t = w.get("temperature", 0.0)
    if not is_number(t) or t < 0:
        raise ValueError(f"workload.temperature must be a number >= 0, got {t!r}")
    if kind == "broadcast":
        lists = {"decode_batches": 1, "raw_bytes": 0}
        for key, least in lists.items():
            if not all(is_int(x) and x >= least for x in w.get(key) or []):
                raise ValueError(f"workload.{key} must be a list of integers >= {least}, got {w.get(key)!r}")
        pairs = w.get("prefill_batches") or []
        if not all(isinstance(p, list) and len(p) == 2 and all(is_int(x) and x >= 1 for x in p)
                   for p in pairs):
            raise ValueError(f"workload.prefill_batches must be a list of [num_seqs, tokens] pairs >= 1, got {pairs!r}")
        if not (w.get("decode_batches") or pairs or w.get("raw_bytes")):
            raise ValueError("workload=broadcast has no payload: decode_batches, prefill_batches and raw_bytes are "
                             "all empty")


def build_workload(w: dict, device: str, seed: int, vocab_size: int) -> Workload:
    """The workload described by config ``w``; on CPU its ``cpu`` overrides apply when ``scale_on_cpu``.

    Raises:
        ValueError: a bad workload configuration (see :func:`check_workload`).
    """
    w = dict(w)
    if device == "cpu" and w.get("scale_on_cpu") and w.get("cpu"):
        w.update(w["cpu"])
    check_workload(w)
    if w.get("kind") == "random":
        return random_requests(w, seed, vocab_size)
    if w.get("kind") == "fixed":
        return fixed_requests(w, seed, vocab_size)
    raise ValueError(f"workload {w.get('name')!r} of kind {w.get('kind')!r} runs no requests through the engine")
