"""Checks of the model a command selects, before any job runs: a preset's values (``model.preset.*``) as
transformers would take them, and that every ``tp`` of the command divides the model's heads and vocabulary,
so that a sweep's bad job fails before its first job rather than when it comes up."""

from __future__ import annotations

import os

from omegaconf import OmegaConf

from common import is_int, is_number

PRESET_DTYPES = ("float32", "bfloat16")  # what ``checkpoint.materialize`` draws weights in
SIZE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "intermediate_size", "vocab_size", "max_position_embeddings")


def check_preset(preset: dict) -> str | None:
    """The first problem of ``preset`` (``transformers.Qwen3Config`` keyword arguments) as one line naming
    ``model.preset.<key>``, or None: a size that is not a positive integer, ``rms_norm_eps`` or
    ``rope_theta`` not a number > 0, a dtype other than float32 / bfloat16, ``hidden_size`` not a multiple of
    ``num_attention_heads`` without ``head_dim``, a key Qwen3Config does not have (transformers would keep
    it and the engine ignore it), or a value transformers' own field validation refuses."""
    for key in SIZE_KEYS + (("head_dim",) if "head_dim" in preset else ()):
        v = preset.get(key)
        if not is_int(v) or v < 1:
            return f"model.preset.{key} must be a positive integer, got {v!r}"
    for key in ("rms_norm_eps", "rope_theta"):
        v = preset.get(key, 1.0)
        if not is_number(v) or v <= 0:
            return f"model.preset.{key} must be a number > 0, got {v!r}"
    if preset.get("dtype", "float32") not in PRESET_DTYPES:
        return f"model.preset.dtype must be one of {', '.join(PRESET_DTYPES)}, got {preset.get('dtype')!r}"
    if preset["hidden_size"] % preset["num_attention_heads"] and "head_dim" not in preset:
        return "model.preset.hidden_size must be a multiple of num_attention_heads (or set head_dim)"
    from transformers import Qwen3Config

    unknown = sorted(set(preset) - set(Qwen3Config().to_dict()) - {"rope_theta"})
    if unknown:
        return f"model.preset.{unknown[0]} is not a transformers.Qwen3Config field"
    try:
        Qwen3Config(**preset)
    except Exception as e:  # transformers' validation: StrictDataclassFieldValidationError, TypeError, ...
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        return f"model.preset: {lines[-1] if lines else type(e).__name__}"
    return None


def check_gpu_count(devices: list[str], tps: list[int]) -> str | None:
    """The engine's message for a ``tp`` above the visible GPUs on a CUDA device (``auto`` where CUDA is
    available), or None; rank 0 spawns every rank on this host (under torchrun the engine checks each
    host's own ranks)."""
    if not tps or "LOCAL_WORLD_SIZE" in os.environ or not {"cuda", "auto"} & set(devices):
        return None
    import torch

    if not torch.cuda.is_available():
        return None  # device=cuda is refused by its own check; auto runs on the CPU
    n = torch.cuda.device_count()
    return f"{max(tps)} ranks on this host need as many GPUs; {n} visible" if max(tps) > n else None


def _presets(conf_dir: str, model: str, devices: list[str]) -> list[tuple[str, dict]]:
    """(name, preset) of every preset that ``model=<model>`` runs on the selected devices (``auto`` picks
    qwen3-0.6b on CUDA and qwen3-tiny on CPU: ``job_setup.resolve_model``)."""
    if model == "auto":
        if "auto" in devices:
            import torch

            devices = [("cuda" if torch.cuda.is_available() else "cpu") if d == "auto" else d for d in devices]
        names = {"qwen3-0.6b" if d == "cuda" else "qwen3-tiny" for d in devices}
    else:
        names = {model}
    found = []
    for name in sorted(names):
        preset = OmegaConf.load(os.path.join(conf_dir, "model", f"{name}.yaml")).get("preset")
        if preset is not None:
            found.append((name, OmegaConf.to_container(preset)))
    return found


def check_models(conf_dir: str, models: list[str], devices: list[str], tps: list[int], paths: list[str],
                 preset_values: dict[str, list], deleted: list[str]) -> str | None:
    """The first problem of the models a command selects, or None. ``models``: the ``model`` options,
    ``paths``: the ``model.path`` values (a checkpoint replaces the preset: its config.json is read and
    checked, ``engine.hf_config.read_hf_config``); ``preset_values``: the ``model.preset.<key>`` values given
    ({key: [values]}, each value checked with the others' first), ``deleted``: keys ``~model.preset.<key>``
    removes; ``tps``: every ``tp`` of the command."""
    from engine.hf_config import split_problem  # the engine's own check (imports torch: only when called)

    for path in paths:
        from engine import ConfigError
        from engine.hf_config import read_hf_config

        path = os.path.abspath(os.path.expanduser(str(path)))
        try:
            shape = read_hf_config(path)
        except ConfigError as e:
            return str(e)
        for tp in tps:
            problem = split_problem(shape, tp, path)
            if problem:
                return problem.replace("tensor_parallel_size=", "tp=", 1)
    if paths:
        return None
    for model in models:
        for name, preset in _presets(conf_dir, model, devices):
            for key in deleted:
                preset.pop(key, None)
            preset.update({k: v[0] for k, v in preset_values.items()})
            variants = [{**preset, key: v} for key, values in preset_values.items() for v in values[1:]]
            for variant in [preset] + variants:
                problem = check_preset(variant) if preset_values or deleted else None
                for tp in tps if problem is None else []:
                    problem = split_problem(variant, tp, f"model={name}")
                    if problem:
                        break
                if problem:
                    return problem.replace("tensor_parallel_size=", "tp=", 1)
    return None
