"""What every job does around its runs: resolve the checkpoint (a preset materialised on first use) and workload,
the checks that need them, a row's configuration and provenance columns, the failed row of a run that did not finish."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
import textwrap

import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from common import is_int
from engine import ConfigError
from engine.config import MODEL_KEYS, read_hf_config, resolve_dtype
from runtime.launch import Launch

from .checkpoint import cache_dir, materialize
from .conf_paths import task_overrides, user_path
from .job_checks import picked_model
from .metrics import pynvml
from .model_checks import check_preset
from .report import one_line, print_summary
from .results_csv import Results
from .schema import COLUMNS, SCHEMA_VERSION, normalize_overrides
from .signals import as_interrupt
from .workloads import Workload, build_workload, effective_workload, given_workload, unread_keys

_AUTO_PICK: dict[str, str] = {}  # "line": what model=auto picked, printed by prepare() once the job's checks pass


def resolve_model(cfg: DictConfig, device: str) -> None:
    """``model=auto`` becomes, in place, the model ``job_checks.picked_model`` picks; ``prepare`` prints the pick."""
    if cfg.model.name != "auto":
        return
    path = cfg.model.get("path")
    with open_dict(cfg):
        cfg.model = picked_model(cfg.model, device)
    _AUTO_PICK["line"] = (f"model=auto: the checkpoint {path} (its config.json and weights)" if path
                          else f"model=auto: {cfg.model.name} on {device}")


def model_name(cfg: DictConfig, path: str) -> str:
    """The ``model`` column: the checkpoint directory's name for a ``model.path``, else the preset's."""
    return os.path.basename(os.path.normpath(path)) if cfg.model.get("path") else cfg.model.name


def model_label(cfg: DictConfig, path: str) -> tuple[str, str]:
    """(``model``, ``model_hash`` columns): the name, and a hash of what the engine reads of the checkpoint's
    configs (``MODEL_KEYS``: not config.json as written, which transformers 4 and 5 spell differently for one
    preset), the safetensors index and the weight files' names and sizes. Raises ConfigError: ``read_hf_config``'s."""
    config = read_hf_config(path)
    h = hashlib.sha256(json.dumps({k: config.get(k) for k in MODEL_KEYS}, sort_keys=True).encode())
    for item in sorted(os.listdir(path)):
        full = os.path.join(path, item)
        if item.endswith(".safetensors.index.json"):
            with open(full, "rb") as f:
                h.update(item.encode() + f.read())
        elif item.endswith(".safetensors"):
            h.update(f"{item}:{os.path.getsize(full)}".encode())
    return model_name(cfg, path), h.hexdigest()[:12]


def model_path(cfg: DictConfig) -> str:
    """``model.path`` when set, else the preset materialised (cached). Raises ConfigError: a bad preset or an
    unwritable cache."""
    if cfg.model.get("path"):
        return user_path(cfg.model.path)
    preset = OmegaConf.to_container(cfg.model.preset)
    try:  # checked before it is drawn only (transformers' import: ~1 s of every run's start)
        return materialize(cfg.model.name, preset, seed=cfg.seed, check=check_preset)
    except OSError as e:
        raise ConfigError(f"cannot write the model cache ({cache_dir()}): {e.strerror or e}") from None


# Command-line keys that have a column of their own, or that do not change what is measured.
NOT_IN_OVERRIDES = {"engine", "control", "tp", "model", "model.path", "device", "dtype", "workload", "seed", "repeat",
                    "results_dir", "results_file", "progress", "nvml_interval_s", "reuse_engine", "tag", "cpu_threads",
                    "step_log", "save_requests"}


def git_commit(repo_dir: str) -> str | None:
    """``$TPCP_GIT_COMMIT`` when set; else the short commit of ``repo_dir`` (``-dirty``: tracked files changed)."""
    if os.environ.get("TPCP_GIT_COMMIT"):
        return os.environ["TPCP_GIT_COMMIT"]
    if not os.path.isdir(os.path.join(repo_dir, ".git")):
        return None

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo_dir, capture_output=True, text=True, timeout=10).stdout.strip()

    try:
        sha = git("rev-parse", "--short=12", "HEAD")
        return sha + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "") if sha else None
    except (OSError, subprocess.SubprocessError):
        return None


def cpu_model() -> str | None:
    """The CPU's model name (/proc/cpuinfo), else ``platform.processor()``."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or None


def package_version(*names: str) -> str | None:
    """The version of the first of the distributions ``names`` that is installed (nothing imported), else None."""
    for name in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(name)
    return None


def driver_version(nvml=pynvml) -> str | None:
    """The NVIDIA driver's version from ``nvml`` (default nvidia-ml-py); None where NVML is missing or unusable."""
    with contextlib.suppress(Exception):  # pynvml.NVMLError: no driver here; AttributeError: no nvidia-ml-py (None)
        nvml.nvmlInit()
        try:
            version = nvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        finally:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
    return None


def metadata(device: str = "cpu") -> dict:
    """Provenance columns of a row: versions (the driver's on CUDA runs), commit, host; on CPU the load."""
    nccl = None
    if torch.cuda.is_available():
        with contextlib.suppress(Exception):
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
    out = {"git_commit": git_commit(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
           "torch_version": torch.__version__, "cuda_version": torch.version.cuda, "nccl_version": nccl,
           "driver_version": driver_version() if device == "cuda" else None,
           "transformers_version": package_version("transformers"),
           "triton_version": package_version("triton", "pytorch-triton", "pytorch-triton-rocm"),
           "host": socket.gethostname(), "python_version": platform.python_version(),
           "cpu_model": cpu_model(), "cpu_cores": os.cpu_count()}
    if device == "cpu":
        out["load_avg_1m"] = os.getloadavg()[0]
    return out


def base_row(cfg: DictConfig, device: str) -> dict:
    """The configuration columns of a row; ``overrides``: the job's other command-line settings."""
    unread = {f"workload.{k}" for k in unread_keys(OmegaConf.to_container(cfg.workload))}
    other = [o for o in task_overrides()
             if o.lstrip("+~").split("=", 1)[0] not in NOT_IN_OVERRIDES | unread and not o.startswith("hydra.")]
    if unread:  # a sweep's ++workload.<key> that only some of its workloads read: the others' rows stay theirs
        print(f"note: workload={cfg.workload.name} does not read {', '.join(sorted(unread))}: not in the row's "
              f"overrides", file=sys.stderr)
    return {"schema_version": SCHEMA_VERSION, "tag": cfg.get("tag"), "engine": cfg.engine, "control": cfg.control.name,
            "tp": cfg.tp, "model": cfg.model.name, "device": device, "dtype": resolve_dtype(cfg.dtype, device),
            "workload": cfg.workload.name, "overrides": normalize_overrides(" ".join(other)), "seed": cfg.seed,
            "hydra_dir": HydraConfig.get().runtime.output_dir if HydraConfig.initialized() else None,  # None: no Hydra
            **metadata(device)}


def check_results_dir(cfg: DictConfig) -> Results:
    """Where this job's rows go (its directory created; checked before the first job: ``job_checks``)."""
    directory = user_path(cfg.results_dir)
    os.makedirs(directory, exist_ok=True)
    config = OmegaConf.to_container(cfg, resolve=True)  # its workload becomes the one used, in prepare()
    return Results(os.path.join(directory, cfg.results_file), COLUMNS, SCHEMA_VERSION, config=config)


def prepare(cfg: DictConfig, device: str, results: Results | None) -> tuple[str, Workload]:
    """(model path, workload); ``results`` (``check_results_dir``'s, None on a worker rank) gets the run's
    configuration. Raises ConfigError (ValueError: workload)."""
    path = model_path(cfg)
    try:
        vocab = read_hf_config(path)["vocab_size"]
    except ConfigError as e:
        raise ConfigError(damaged_preset(str(e), cfg, path)) from None
    w = given_workload(OmegaConf.to_container(cfg.workload), task_overrides())  # the command's keys win over cpu
    work = build_workload(w, device, cfg.seed, vocab)
    if results is not None:  # the rank that reports
        results.config.update(device=device, dtype=resolve_dtype(cfg.dtype, device))  # auto resolved
        results.config["workload"] = ran = effective_workload(w, device)  # what ran: the CPU scale-down applied
        if scaled := {k: (w.get(k), v) for k, v in ran.items() if k != "cpu" and v != w.get(k)}:
            print(scale_down_note(w["name"], scaled))
        results.config["model"] = {"name": model_name(cfg, path), "path": path}  # and a preset's values
        if not cfg.model.get("path"):
            results.config["model"]["preset"] = OmegaConf.to_container(cfg.model.preset)
        if line := _AUTO_PICK.pop("line", None):
            print(line)
        warn_shared_cores(cfg, device)
    return path, work


def scale_down_note(name: str, scaled: dict) -> str:
    """The note that a workload's ``cpu:`` block applies, ``scaled``: {key: (given, ran)}, wrapped at 120 columns
    between its items, never inside one ("min_output_len 100 -> 16" stays on one line)."""
    items = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in scaled.items()).replace(" ", "\u00a0").replace(",\u00a0", ", ")
    return textwrap.fill(f"workload={name} on CPU: its cpu: block applies ({items}); a key set on the command line "
                         "wins", 120, subsequent_indent="  ").replace("\u00a0", " ")


def damaged_preset(message: str, cfg: DictConfig, path: str | None) -> str:
    """``message`` and, where it names ``path``, a preset of the cache (not a checkpoint given), how to mend it."""
    if path and not cfg.model.get("path") and path in message:
        return f"{message} (a damaged preset: delete {path} and the next run draws it again)"
    return message


def warn_shared_cores(cfg: DictConfig, device: str) -> str | None:
    """On CPU, the ``warning:`` line (printed to stderr) when ranks x torch threads exceed this process's cores."""
    threads = cfg.get("cpu_threads") or max(1, (os.cpu_count() or 1) // cfg.tp)
    if device != "cpu" or cfg.get("engine", "tp") != "tp" or not is_int(threads):
        return None
    launch = Launch.from_env()
    ranks = launch.local_world_size if launch else cfg.tp
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if ranks * threads <= cores:
        return None
    line = (f"warning: tp={cfg.tp}: {ranks} rank(s) on this host x {threads} torch thread(s) each = "
            f"{ranks * threads} threads on the {cores} core(s) this process may use; they take turns, so the "
            f"timings measure that contention (keep ranks x cpu_threads <= {cores})")
    print(line, file=sys.stderr, flush=True)
    return line


def failed(results: Results, row0: dict, repeat: int, e: BaseException, repeats: int = 1) -> int:
    """Append and print the failed row of an interrupted or crashed run (none when the run has its row: the stop
    came after it), and which of the job's ``repeats`` did not run; returns 130 or 1."""
    e = as_interrupt(e)
    if row0.get("run_id") in results.run_ids:
        print(f"error: {one_line(e)}, after repeat {repeat}'s row", file=sys.stderr)
    else:
        row = {**row0, "repeat": repeat, "status": "failed", "error": one_line(e)}
        written = results.add(row)
        kept = os.path.join(os.path.dirname(results.path), "requests", f"{row.get('run_id')}.jsonl")
        # a serve run's requests finished before the failure stay in its file
        print_summary(row, written, files=[f"requests    {kept} (the requests that finished before it failed)"]
                      if row.get("run_id") and os.path.isfile(kept) else (), run_file=results.run_file)
        print(f"error: {one_line(e)}", file=sys.stderr)
    if repeat + 1 < repeats:
        rest = f"repeat {repeat + 1}" if repeat + 2 == repeats else f"repeats {repeat + 1}-{repeats - 1}"
        print(f"  the job stopped at repeat {repeat}: {rest} did not run")
    return 130 if isinstance(e, KeyboardInterrupt) else 1


def engine_settings(cfg: DictConfig, path: str, device: str) -> tuple[dict, bool]:
    """(``EngineConfig`` keyword arguments, ``async_scheduling``: apart, as a kept engine can change it)."""
    options = OmegaConf.to_container(cfg.llm)
    async_scheduling = options.pop("async_scheduling")
    return dict(model=path, tensor_parallel_size=cfg.tp, control=cfg.control.name, device=device, dtype=cfg.dtype,
                cpu_threads=cfg.cpu_threads or 0, control_options=OmegaConf.to_container(cfg.control.options),
                seed=cfg.seed, profile=cfg.profile, profile_steps=cfg.profile_steps, **options), async_scheduling
