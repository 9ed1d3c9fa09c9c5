"""Workloads: the requests of one run, drawn reproducibly from the workload config and the seed."""

from __future__ import annotations

import random
from dataclasses import dataclass

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


def build_workload(w: dict, device: str, seed: int, vocab_size: int) -> Workload:
    """The workload described by config ``w``; on CPU its ``cpu`` overrides apply when ``scale_on_cpu``.

    Raises:
        ValueError: an unknown workload kind.
    """
    w = dict(w)
    if device == "cpu" and w.get("scale_on_cpu") and w.get("cpu"):
        w.update(w["cpu"])
    if w.get("kind") == "random":
        return random_requests(w, seed, vocab_size)
    if w.get("kind") == "fixed":
        return fixed_requests(w, seed, vocab_size)
    raise ValueError(f"workload {w.get('name')!r}: unknown kind {w.get('kind')!r}")
