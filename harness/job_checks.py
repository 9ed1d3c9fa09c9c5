"""What Hydra cannot know about one composed job, checked for every job of a command before the first
runs (``preflight.check_command``): value ranges, the workload as its kind reads it, the engine's settings
without a checkpoint, the plane's options, the model's shape against tp, a checkpoint's config."""

from __future__ import annotations

import dataclasses
import os

from omegaconf import DictConfig, OmegaConf

from .conf_paths import group_options, results_problem
from .model_checks import check_gpu_count, check_model
from .value_checks import VALUE_CHECKS


def _given(job: list[str]) -> list[str]:
    """The keys ``job``'s overrides set (prefixes ``+``, ``++`` stripped; deletions left out)."""
    return [a.split("=", 1)[0].lstrip("+") for a in job if "=" in a and not a.startswith("~")]


def cli_message(message: str, llm_keys) -> str:
    """An engine ``ConfigError`` that names a setting by its keyword (``gemm=cublas needs ...``) renamed as
    the command line spells it (``llm.gemm=cublas needs ...``) when it is one of ``llm_keys``."""
    name = message.split(" ", 1)[0].split("=", 1)[0]
    return f"llm.{message}" if name in llm_keys else message


def _check_workload(cfg: DictConfig, job: list[str], compose) -> str | None:
    """The workload as its kind checks it; a key its option lacks (``++workload.iterations`` on bench) checked
    as the first workload that has the key would check it."""
    from .workloads import check_workload

    own = compose([a for a in job if a.split("=", 1)[0] == "workload"]).workload
    try:
        check_workload(OmegaConf.to_container(cfg.workload))
        for key in (k.split(".", 1)[1] for k in _given(job) if k.startswith("workload.")):
            if OmegaConf.select(own, key, default=_NONE) is not _NONE:
                continue
            for option in group_options("workload"):
                donor = compose([f"workload={option}"]).workload
                if OmegaConf.select(donor, key, default=_NONE) is not _NONE:
                    donor = OmegaConf.to_container(donor)  # untyped: the kind's check words the problem
                    *path, last = key.split(".")
                    node = donor
                    for part in path:
                        node = node[part]
                    node[last] = OmegaConf.select(cfg.workload, key)
                    check_workload(donor)
                    break
    except ValueError as e:
        return str(e)
    return None


_NONE = object()


def _check_llm(cfg: DictConfig, given: list[str]) -> str | None:
    """The job's dtype and CPU threads, then each ``llm.*`` setting it gives, as the engine checks them
    without a checkpoint."""
    from engine import ConfigError, EngineConfig

    try:
        EngineConfig.check_settings(device=cfg.device, dtype=cfg.dtype, cpu_threads=cfg.get("cpu_threads") or 0)
    except ConfigError as e:
        return str(e)
    for key in (k for k in given if k.startswith("llm.")):
        name = key.split(".", 1)[1]
        try:
            EngineConfig.check_settings(**{name: OmegaConf.select(cfg, key), "device": cfg.device})
        except TypeError:
            continue  # not an engine setting the check knows (Hydra has checked that the key exists)
        except ConfigError as e:
            return cli_message(str(e), {name})
    return None


def _check_control(cfg: DictConfig, compose) -> str | None:
    """The plane's options through its own check (``check_options``), at the job's tp; an option the plane
    does not take (added with ``+``/``++``) refused by name."""
    from backends import get_control_plane

    plane = cfg.control.name
    known = sorted(compose([f"control={plane}"]).control.options)
    extra = sorted(set(cfg.control.options) - set(known))
    if extra:
        return f"control={plane} has no option {extra[0]!r} (its options: {', '.join(known) or 'none'})"
    if cfg.workload.get("kind") == "broadcast" and cfg.control.name == "ideal":
        return ("workload=broadcast with control=ideal: ideal has no transport to time alone (sweep the planes "
                "that send; ideal is the baseline of every other workload)")
    try:
        get_control_plane(cfg.control.name).check_options(cfg.tp, **OmegaConf.to_container(cfg.control.options))
    except ValueError as e:
        return str(e)
    return None


def picked_model(cfg: DictConfig, compose) -> dict:
    """The job's ``model`` node, ``model=auto`` replaced by the preset it picks for the device (qwen3-0.6b on
    CUDA, qwen3-tiny on CPU; ``job_setup.resolve_model``), the command's ``model.preset.*`` on top."""
    model = OmegaConf.to_container(cfg.model)
    if model["name"] != "auto" or model.get("path"):
        return model
    from engine.config import resolve_device

    device = resolve_device(cfg.device)
    chosen = OmegaConf.to_container(compose([f"model={'qwen3-0.6b' if device == 'cuda' else 'qwen3-tiny'}"]).model)
    chosen["preset"].update(model.get("preset") or {})
    return chosen


def _strict_bools(cfg: DictConfig, job: list[str]) -> str | None:
    """A switch set to anything but true or false: OmegaConf would read ``yes``, ``on`` or ``2`` as true."""
    for arg in job:
        key, _, raw = arg.lstrip("+").partition("=")
        if isinstance(OmegaConf.select(cfg, key, default=None), bool) and raw.lower() not in ("true", "false"):
            return f"{key} must be true or false, got {raw!r}"
    return None


def _unknown_keys(cfg: DictConfig) -> str | None:
    """A top-level or ``llm.*`` key the schema lacks (``+foo=1`` adds one): nothing would read it."""
    from .conf_schema import LLM_DEFAULTS, HarnessConfig

    known = {f.name for f in dataclasses.fields(HarnessConfig)}
    extra = [k for k in cfg if k not in known] + [f"llm.{k}" for k in cfg.llm if k not in LLM_DEFAULTS]
    return f"unknown config key {extra[0]!r}: nothing reads it (the keys: harness/conf_schema.py)" if extra else None


def _check_where(cfg: DictConfig) -> str | None:
    """The device (CUDA there when asked for), one device for ``engine=hf``, and where the rows go (not on a
    torchrun rank other than 0, which writes none)."""
    if cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return "device=cuda but CUDA is not available here (use device=cpu or auto)"
    if cfg.engine == "hf" and cfg.tp != 1:
        return "engine=hf runs on one device: use tp=1"
    return results_problem(cfg.results_dir, cfg.results_file) if os.environ.get("RANK", "0") == "0" else None


def check_job(cfg: DictConfig, job: list[str], compose) -> str | None:
    """The first problem of one composed job (``job``: its overrides), as one line, or None."""
    given = _given(job)
    problem = _strict_bools(cfg, job) or _unknown_keys(cfg)
    if problem:
        return problem
    for key in (k for k in given if k in VALUE_CHECKS):
        problem = VALUE_CHECKS[key](key, OmegaConf.select(cfg, key))
        if problem:
            return problem
    problem = _check_where(cfg)
    if problem:
        return problem
    builds_engine = cfg.engine == "tp" and cfg.workload.get("kind") != "broadcast"
    tp = cfg.tp if builds_engine else None
    preset_given = any(a.lstrip("+~").startswith("model.preset.") for a in job)
    return (_check_workload(cfg, job, compose) or (_check_llm(cfg, given) if builds_engine else None)
            or check_model(picked_model(cfg, compose), tp, cfg.device, preset_given)
            or check_gpu_count([cfg.device], [tp] if tp else []) or _check_control(cfg, compose))
