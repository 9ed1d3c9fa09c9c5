"""Checks of a job's model before any job runs: its preset, the split over ``tp``, the GPUs and memory it needs."""

from __future__ import annotations

import os

from common import is_int, is_number
from engine import ConfigError
from engine.config import REQUIRED_HF_KEYS, read_hf_config, split_problem

from .conf_schema import problem_of

PRESET_DTYPES = ("float32", "bfloat16")  # what ``checkpoint.materialize`` draws weights in
SIZE_KEYS = tuple(k for k in REQUIRED_HF_KEYS if k != "rms_norm_eps")  # its integers; rms_norm_eps is checked below


def check_preset(preset: dict, fields: bool = True) -> str | None:
    """The first problem of ``preset`` (``Qwen3Config`` keyword arguments) as one line, or None; ``fields``: also
    every field as transformers takes it (imports transformers, ~1 s)."""
    if not isinstance(preset, dict):
        return f"model.preset must be a mapping of Qwen3Config fields (hidden_size: ..., ...), got {preset!r}"
    for key in SIZE_KEYS + (("head_dim",) if "head_dim" in preset else ()):
        v = preset.get(key)
        if not is_int(v) or v < 1:
            return f"model.preset.{key} must be a positive integer, got {v!r}"
    for key in ("rms_norm_eps", "rope_theta", "initializer_range"):  # the last: the weights' std (inf: garbage)
        v = preset.get(key, 1.0)
        if not is_number(v) or v <= 0:
            return f"model.preset.{key} must be a number > 0, got {v!r}"
    if preset.get("dtype", "float32") not in PRESET_DTYPES:
        return f"model.preset.dtype must be one of {', '.join(PRESET_DTYPES)}, got {preset.get('dtype')!r}"
    if preset["num_attention_heads"] % preset["num_key_value_heads"]:
        return (f"model.preset.num_attention_heads={preset['num_attention_heads']} must be a multiple of "
                f"num_key_value_heads={preset['num_key_value_heads']}")
    if preset["hidden_size"] % preset["num_attention_heads"] and "head_dim" not in preset:
        return "model.preset.hidden_size must be a multiple of num_attention_heads (or set head_dim)"
    if not fields:
        return None
    from transformers import Qwen3Config

    if unknown := sorted(set(preset) - set(Qwen3Config().to_dict()) - {"rope_theta"}):
        return f"model.preset.{unknown[0]} is not a transformers.Qwen3Config field"
    try:
        Qwen3Config(**preset)
    except Exception as e:  # transformers' validation: StrictDataclassFieldValidationError, TypeError, ...
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        return f"model.preset: {lines[-1] if lines else type(e).__name__}"
    return None


def check_model(model: dict, tp: int | None, device: str, preset_given: bool) -> str | None:
    """The first problem of one job's model (``model=auto`` resolved), or None; ``tp``: None when no engine."""
    if isinstance(model.get("path"), list | dict | bool):  # a number names a directory: 3 is ./3
        return f"model.path is a checkpoint directory, got {model['path']!r}"
    path = os.path.abspath(os.path.expanduser(str(model["path"]))) if model.get("path") else None
    label = path or f"model={model['name']}"
    try:
        shape = model_shape(model)
    except ConfigError as e:
        return str(e)
    if not path and (problem := check_preset(shape, fields=preset_given)):  # an edited conf/model/*.yaml too
        return problem
    if tp is not None and (problem := split_problem(shape, tp, label)):
        return problem.replace("tensor_parallel_size=", "tp=", 1)
    if path:
        from engine.loader import check_checkpoint  # imports torch: only for a checkpoint given by path

        if problem := problem_of(ConfigError, check_checkpoint, path, shape):  # its safetensors headers
            return problem
    return memory_problem(shape, label, device, building=not path)


def model_shape(model: dict) -> dict:
    """The shape of ``model`` (``picked_model``'s, as a dict): its checkpoint's config.json, else its preset."""
    path = model.get("path")
    return read_hf_config(os.path.abspath(os.path.expanduser(str(path)))) if path else model.get("preset") or {}


def parameter_count(shape: dict) -> int:
    """Qwen3's parameters from its config: embeddings (twice when untied), attention, MLP (not norms)."""
    h, layers, inter = (shape[k] for k in ("hidden_size", "num_hidden_layers", "intermediate_size"))
    d = shape.get("head_dim") or h // shape["num_attention_heads"]
    attn = 2 * h * d * (shape["num_attention_heads"] + shape["num_key_value_heads"])
    embeddings = shape["vocab_size"] * h * (1 if shape.get("tie_word_embeddings", False) else 2)
    return embeddings + layers * (attn + 3 * h * inter)


def memory_problem(shape: dict, label: str, device: str, building: bool) -> str | None:
    """A model whose float32 weights do not fit this machine's memory where it holds them, or None (else: OOM)."""
    params = parameter_count(shape)
    have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if 4 * params <= have or device == "cuda" and not building:  # device=cuda: CUDA is there (checked apart)
        return None
    import torch

    if torch.cuda.is_available() and device != "cpu" and (not building or shape.get("dtype") == "bfloat16"):
        return None  # built and run in bfloat16 on the GPU
    return (f"{label} has {params / 1e9:.1f} B parameters: {4 * params / 2**30:.0f} GiB in float32, more than "
            f"this machine's {have / 2**30:.0f} GiB of memory (run it on a GPU machine)")
