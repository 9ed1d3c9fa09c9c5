"""Checks of a generate() call's requests, on rank 0 before the first step."""

from __future__ import annotations

import math

from common import is_int

from .config import ConfigError, EngineConfig
from .sampling_params import SamplingParams


def validate_requests(cfg: EngineConfig, num_kvcache_blocks: int, prompts: list[list[int]],
                      params: list[SamplingParams]) -> None:
    """Raises ConfigError (one line, naming the prompt) for: no prompts, a params/prompts count mismatch, a
    prompt that is not a list of ints, empty, at least ``max_model_len`` tokens long, with a token id
    outside the vocabulary, or needing more KV blocks than the cache has."""
    if not prompts:
        raise ConfigError("generate() needs at least one prompt")
    if len(params) != len(prompts):
        raise ConfigError(f"{len(params)} sampling params for {len(prompts)} prompts")
    vocab = cfg.hf_config["vocab_size"]
    for i, (p, sp) in enumerate(zip(prompts, params, strict=True)):
        if not isinstance(p, (list, tuple)) and not (hasattr(p, "ndim") and p.ndim == 1):
            raise ConfigError(f"prompt {i} is a {type(p).__name__}; prompt_token_ids is a list of token-id lists")
        if len(p) == 0:
            raise ConfigError(f"prompt {i} is empty")
        if not all(type(t) is int for t in p) and not all(is_int(t) for t in p):  # (the first: 10x faster)
            raise ConfigError(f"prompt {i} has a token id that is not an integer")
        if len(p) >= cfg.max_model_len:
            raise ConfigError(f"prompt {i} has {len(p)} tokens; max_model_len={cfg.max_model_len} leaves "
                              f"no room to generate")
        if min(p) < 0 or max(p) >= vocab:
            raise ConfigError(f"prompt {i} has a token id outside [0, {vocab})")
        need = math.ceil(min(len(p) + sp.max_tokens, cfg.max_model_len) / cfg.kvcache_block_size)
        if need > num_kvcache_blocks:
            raise ConfigError(f"prompt {i} needs {need} KV blocks; the cache has {num_kvcache_blocks}")
