"""What every harness job does before and after its runs: resolve the device, the checkpoint (a preset
materialised on first use) and the workload, check everything that can be checked before a process starts,
the configuration columns of a row, and the failed row of a run that did not finish."""

from __future__ import annotations

import os
import sys

import torch
from omegaconf import DictConfig, OmegaConf

from engine import ConfigError
from engine.config import REQUIRED_HF_KEYS, read_hf_config

from .checkpoint import cache_dir, materialize
from .report import one_line, print_summary
from .results_csv import append_row
from .schema import COLUMNS, SCHEMA_VERSION
from .sysinfo import metadata
from .workloads import Workload, build_workload


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def model_path(cfg: DictConfig) -> str:
    """``model.path`` when set, else the preset materialised with transformers (cached).

    Raises:
        ConfigError: a preset size that is not a positive integer, or a cache directory that cannot be
            written.
    """
    if cfg.model.get("path"):
        return os.path.abspath(os.path.expanduser(cfg.model.path))
    preset = OmegaConf.to_container(cfg.model.preset)
    for key in REQUIRED_HF_KEYS:
        v = preset.get(key)
        if key != "rms_norm_eps" and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ConfigError(f"model.preset.{key} must be a positive integer, got {v!r}")
    if preset["hidden_size"] % preset["num_attention_heads"] and "head_dim" not in preset:
        raise ConfigError("model.preset.hidden_size must be a multiple of num_attention_heads (or set head_dim)")
    try:
        return materialize(cfg.model.name, preset, seed=cfg.seed)
    except OSError as e:
        raise ConfigError(f"cannot write the model cache ({cache_dir()}): {e.strerror or e}") from None


def control_options(cfg: DictConfig) -> dict:
    options = cfg.control.get("options")
    return OmegaConf.to_container(options) if options is not None else {}


# Command-line keys that have a column of their own, or that do not change what is measured.
NOT_IN_OVERRIDES = {"engine", "control", "tp", "model", "device", "dtype", "workload", "seed", "repeat",
                    "results_dir", "results_file", "progress", "nvml_interval_s", "reuse_engine"}


def task_overrides() -> list[str]:
    """This job's command-line overrides (``key=value``), [] when not running under Hydra."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return list(HydraConfig.get().overrides.task)
    except Exception:  # not running under Hydra (e.g. called from Python)
        return []


def base_row(cfg: DictConfig, device: str) -> dict:
    """The configuration columns of a row; ``overrides`` keeps the job's other command-line settings
    (``workload.num_seqs=8 llm.async_scheduling=false``...) so rows of a sweep over them stay apart."""
    other = sorted(o for o in task_overrides()
                   if o.lstrip("+~").split("=", 1)[0] not in NOT_IN_OVERRIDES and not o.startswith("hydra."))
    return {"schema_version": SCHEMA_VERSION, "engine": cfg.engine, "control": cfg.control.name, "tp": cfg.tp,
            "model": cfg.model.name, "device": device, "dtype": cfg.dtype, "workload": cfg.workload.name,
            "overrides": " ".join(other) or None, "seed": cfg.seed, **metadata()}


def workload_config(cfg: DictConfig) -> dict:
    """The workload as a dict; keys the user set on the command line win over its ``cpu`` scale-down."""
    w = OmegaConf.to_container(cfg.workload)
    for item in task_overrides():
        key = item.lstrip("+~").split("=", 1)[0]
        if key.startswith("workload.") and isinstance(w.get("cpu"), dict):
            w["cpu"].pop(key.split(".", 1)[1], None)
    return w


def check_results_dir(cfg: DictConfig) -> str:
    """The results CSV path; its directory is created and must be writable.

    Raises:
        ConfigError: the directory cannot be created or written.
    """
    directory = os.path.abspath(cfg.results_dir)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot write results to {directory}: {e.strerror}") from None
    if not os.access(directory, os.W_OK):
        raise ConfigError(f"cannot write results to {directory}: not writable")
    return os.path.join(directory, cfg.results_file)


def prepare(cfg: DictConfig, device: str, results: bool = True) -> tuple[str | None, str, Workload]:
    """Everything that can be checked before a process is spawned: results directory (unless ``results`` is
    false: a rank that writes none), checkpoint, workload and whether its sequences fit
    ``llm.max_model_len``. Returns (results CSV path or None, model path, workload).

    Raises:
        ConfigError: any of these is wrong.
    """
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but CUDA is not available here (use device=cpu or auto)")
    results = check_results_dir(cfg) if results else None
    path = model_path(cfg)
    hf = read_hf_config(path)
    work = build_workload(workload_config(cfg), device, cfg.seed, hf["vocab_size"])
    longest = max(len(p) + sp.max_tokens for p, sp in zip(work.prompts, work.params))
    max_model_len = cfg.llm.max_model_len
    limit = min(max_model_len, hf["max_position_embeddings"]) if isinstance(max_model_len, int) else longest
    if longest > limit:  # (a max_model_len of the wrong type is reported by the engine's own checks)
        raise ConfigError(f"workload {work.name} has sequences of up to {longest} tokens (prompt + max_tokens); "
                          f"the limit is {limit} (llm.max_model_len={cfg.llm.max_model_len}, the model's "
                          f"max_position_embeddings={hf['max_position_embeddings']})")
    return results, path, work


def failed(results: str, row0: dict, repeat: int, e: BaseException) -> int:
    """Append the failed row of an interrupted or crashed run; returns the exit code (130 or 1)."""
    row = {**row0, "repeat": repeat, "status": "failed", "error": one_line(e)}
    print_summary(row, append_row(results, COLUMNS, row, SCHEMA_VERSION))
    print(f"error: {one_line(e)}", file=sys.stderr)
    return 130 if isinstance(e, KeyboardInterrupt) else 1


def engine_settings(cfg: DictConfig, path: str, device: str) -> tuple[dict, bool]:
    """The engine's keyword arguments (``engine.EngineConfig``) for this job, without ``async_scheduling``,
    which comes second (the engine reads it at every step, so a kept engine can change it).

    Raises:
        ConfigError: ``llm.async_scheduling`` is not a bool.
    """
    options = OmegaConf.to_container(cfg.llm)
    async_scheduling = options.pop("async_scheduling")
    if not isinstance(async_scheduling, bool):
        raise ConfigError(f"llm.async_scheduling must be true or false, got {async_scheduling!r}")
    settings = dict(model=path, tensor_parallel_size=cfg.tp, control=cfg.control.name, device=device,
                    dtype=cfg.dtype, control_options=control_options(cfg), seed=cfg.seed, **options)
    return settings, async_scheduling
