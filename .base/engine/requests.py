"""Rank 0's checks of what a user asks of :class:`engine.LLM`: prompts, their sampling parameters, arrival times."""

from __future__ import annotations

import math
import time

from common import is_int, is_number

from .config import ConfigError, EngineConfig
from .sequence import SamplingParams


def checked_requests(cfg: EngineConfig, num_blocks: int, prompts, params) -> tuple[list[list[int]],
                                                                                    list[SamplingParams]]:
    """The prompts as lists of ints (lists, tuples or 1-D arrays and tensors of token ids), and a SamplingParams for
    each (one for all, or a list). Raises ConfigError (one line, naming the prompt): no prompts, not a list of
    them, params of another type or count, a prompt not of token ids, empty, ``max_model_len`` tokens or more, out
    of the vocabulary, or needing more than the ``num_blocks`` KV blocks a rank has."""
    vocab = cfg.hf_config["vocab_size"]
    if getattr(prompts, "ndim", None) == 2:
        prompts = prompts.tolist()
    if not isinstance(prompts, list | tuple):
        raise ConfigError(f"prompt_token_ids is a list of prompts, each a list of token ids, not "
                          f"{type(prompts).__name__}")
    if not prompts:
        raise ConfigError("generate() needs at least one prompt")
    if isinstance(params, SamplingParams):
        params = [params] * len(prompts)
    if not isinstance(params, list | tuple) or not all(isinstance(sp, SamplingParams) for sp in params):
        raise ConfigError(f"sampling_params is a SamplingParams or a list of them, not {type(params).__name__}")
    if len(params) != len(prompts):
        raise ConfigError(f"{len(params)} sampling params for {len(prompts)} prompts")
    prompts = [token_ids(i, p, vocab) for i, p in enumerate(prompts)]
    for i, (p, sp) in enumerate(zip(prompts, params, strict=True)):
        if len(p) >= cfg.max_model_len:
            raise ConfigError(f"prompt {i} has {len(p)} tokens; max_model_len={cfg.max_model_len} leaves "
                              f"no room to generate")
        need = math.ceil(min(len(p) + sp.max_tokens, cfg.max_model_len) / cfg.kvcache_block_size)
        if need > num_blocks:
            raise ConfigError(f"prompt {i} needs {need} KV blocks; the cache has {num_blocks}")
    return prompts, list(params)


def token_ids(i: int, p, vocab: int) -> list[int]:
    """Prompt ``i`` as a list of ints in [0, vocab). Raises ConfigError."""
    if getattr(p, "ndim", None) == 1:
        p = p.tolist()  # numpy and torch: their scalars are no ints
    if not isinstance(p, list | tuple):
        raise ConfigError(f"prompt {i} is of type {type(p).__name__}, not a list of token ids")
    if len(p) == 0:
        raise ConfigError(f"prompt {i} is empty")
    if not all(type(t) is int for t in p) and not all(is_int(t) for t in p):  # (the first: 10x faster)
        raise ConfigError(f"prompt {i} has a token id that is not an integer")
    if min(p) < 0 or max(p) >= vocab:
        raise ConfigError(f"prompt {i} has a token id outside [0, {vocab})")
    return list(map(int, p))


MAX_AHEAD_S = 86_400.0  # an arrival further ahead is a mistake (time.time() given for time.perf_counter())


def arrival_times(arrival_s: list | None, n: int = 1) -> list[float]:
    """The arrival times of ``n`` requests, ``time.perf_counter()`` s (None: all now). Raises ConfigError: not ``n``
    of them, or one that is not a finite number at most ``MAX_AHEAD_S`` ahead (it would never be served)."""
    now = time.perf_counter()
    if arrival_s is None:
        return [now] * n
    if len(arrival_s) != n:
        raise ConfigError(f"{len(arrival_s)} arrival times for {n} prompts")
    for t in arrival_s:
        if not is_number(t) or t - now > MAX_AHEAD_S:
            raise ConfigError(f"arrival time {t!r} is not a time.perf_counter() value within a day of now "
                              f"({now:.1f}): that request would never be served")
    return [float(t) for t in arrival_s]
