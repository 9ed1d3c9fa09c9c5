"""A Qwen3 checkpoint's config.json as the engine reads it, and whether a tensor-parallel size splits it."""

from __future__ import annotations

import json
import os

from common import ConfigError, is_int, is_number

REQUIRED_HF_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                    "intermediate_size", "vocab_size", "rms_norm_eps", "max_position_embeddings")


def split_problem(hf: dict, tp: int, where: str) -> str | None:
    """Why ``tp`` cannot shard the attention heads, KV heads or vocabulary of ``hf`` (read from ``where``), or
    why its KV heads do not group its query heads; None when both work."""
    if hf["num_attention_heads"] % hf["num_key_value_heads"]:
        return (f"num_key_value_heads={hf['num_key_value_heads']} does not divide num_attention_heads="
                f"{hf['num_attention_heads']} of {where} (each KV head serves a whole group of query heads)")
    for key in ("num_attention_heads", "num_key_value_heads", "vocab_size"):
        if hf[key] % tp:
            return f"tensor_parallel_size={tp} does not divide {key}={hf[key]} of {where}"
    return None


def read_hf_config(path: str) -> dict:
    """``path/config.json`` of a Qwen3 checkpoint as a dict, with ``head_dim`` and ``rope_theta`` filled in
    (transformers 5 keeps the latter in ``rope_parameters``) and generation_config.json's eos ids. Raises
    ConfigError: missing directory, config.json or safetensors file, not Qwen3, a required key missing or of
    the wrong type, or RoPE scaling (unsupported)."""
    if os.path.isfile(path):
        raise ConfigError(f"{path} is a file, not a checkpoint directory")
    if not os.path.isdir(path):
        raise ConfigError(f"checkpoint directory not found: {path}")
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        raise ConfigError(f"no config.json in checkpoint directory {path}")
    try:
        with open(cfg_path) as f:
            hf = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"cannot read {cfg_path}: {e}") from None
    if not isinstance(hf, dict):
        raise ConfigError(f"{cfg_path} is not a JSON object")
    if hf.get("model_type") != "qwen3":
        raise ConfigError(f"{cfg_path}: model_type {hf.get('model_type')!r} is not supported (only 'qwen3')")
    if missing := [k for k in REQUIRED_HF_KEYS if k not in hf]:
        raise ConfigError(f"{cfg_path} lacks {', '.join(missing)}")
    if bad := [k for k in REQUIRED_HF_KEYS if k != "rms_norm_eps" and (not is_int(hf[k]) or hf[k] < 1)]:
        raise ConfigError(f"{cfg_path}: {bad[0]} must be a positive integer, got {hf[bad[0]]!r}")
    if not any(name.endswith(".safetensors") for name in os.listdir(path)):
        raise ConfigError(f"no *.safetensors file in checkpoint directory {path}")
    hf.setdefault("head_dim", hf["hidden_size"] // hf["num_attention_heads"])
    rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise ConfigError(f"{cfg_path}: RoPE scaling {rope} is not supported")
    hf["rope_theta"] = float(rope.get("rope_theta", hf.get("rope_theta", 10000.0)))
    hf.setdefault("tie_word_embeddings", False)
    if not is_number(hf["rms_norm_eps"]) or hf["rms_norm_eps"] <= 0:
        raise ConfigError(f"{cfg_path}: rms_norm_eps must be a number > 0, got {hf['rms_norm_eps']!r}")
    if not isinstance(hf["tie_word_embeddings"], bool):
        raise ConfigError(f"{cfg_path}: tie_word_embeddings must be true or false, got {hf['tie_word_embeddings']!r}")
    gen_path = os.path.join(path, "generation_config.json")
    if os.path.isfile(gen_path):
        try:
            with open(gen_path) as f:
                hf["generation_eos_token_id"] = json.load(f).get("eos_token_id")
        except (OSError, json.JSONDecodeError, AttributeError) as e:
            raise ConfigError(f"cannot read {gen_path}: {e}") from None
    for key, where in (("eos_token_id", cfg_path), ("generation_eos_token_id", gen_path)):
        eos = hf.get(key)
        if eos is not None and not (is_int(eos) or isinstance(eos, list) and all(is_int(i) for i in eos)):
            raise ConfigError(f"{where}: eos_token_id must be a token id or a list of them, got {eos!r}")
    return hf
