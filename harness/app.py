"""One harness job: build the engine, run the workload ``repeat`` times, append one CSV row per repeat."""

from __future__ import annotations

import os
import sys
import time

import torch
from omegaconf import DictConfig, OmegaConf

from engine import LLM, ConfigError, SamplingParams
from engine.config import REQUIRED_HF_KEYS, read_hf_config

from . import metrics
from .broadcast import run_broadcast
from .checkpoint import cache_dir, materialize
from .engine_cache import engine_key, get_engine
from .engine_cache import release as release_engine
from .hf_peer import run_hf
from .report import one_line, print_broadcast, print_floor, print_summary
from .nvml_sampler import NvmlSampler
from .results_csv import append_row
from .schema import COLUMNS, SCHEMA_VERSION
from .sysinfo import metadata
from .workloads import Workload, build_workload, check_workload


SWEEP_ROWS: list[dict] = []  # the ok rows this process wrote (the end-of-sweep summary reads them)


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


def run_pass(llm: LLM, work: Workload, progress: bool) -> tuple[list[dict], list, float, float]:
    """The workload once, from a reset engine: (outputs, step records, start s, end s)."""
    llm.reset()
    outputs, steps = [], []
    start = time.perf_counter()
    for _ in range(work.iterations):
        outputs += llm.generate(work.prompts, work.params, use_tqdm=progress and work.iterations == 1)
        steps += llm.steps
    return outputs, steps, start, time.perf_counter()


def timed_run(llm: LLM, work: Workload, sampler: NvmlSampler, progress: bool) -> dict:
    """One timed pass over the workload from a reset engine (cold prefix cache, reseeded sampling); returns
    the metric columns. Under ``control=ideal`` an untimed recording pass comes first, and the timed pass
    replays its step messages with no transport (``backends/ideal.py``)."""
    replay = hasattr(llm.control, "start_replay")
    if replay:
        llm.control.start_recording()
        run_pass(llm, work, progress=False)
        llm.control.stop_recording()
    llm.collect_control_stats()  # forget what came before (warm-up, recording pass, previous repeat)
    if replay:
        llm.control.start_replay()
    sampler.start()
    try:
        outputs, steps, start, end = run_pass(llm, work, progress)
    finally:
        sampler.stop()
    if replay:
        llm.control.finish_replay()
    row = metrics.request_metrics(outputs, work.prompt_lens * work.iterations, start, end)
    row.update(metrics.step_metrics(steps))
    row.update(metrics.control_metrics(llm.collect_control_stats(), steps))
    row.update(sampler.summary())
    row.update({"preemptions": sum(o["num_preemptions"] for o in outputs),
                "prefix_cache_hit_tokens": llm.block_manager.num_cache_hit_tokens,
                "kv_blocks": llm.num_kvcache_blocks, "kvcache_block_size": llm.config.kvcache_block_size})
    return row


def run_job(cfg: DictConfig) -> int:
    """Run the configured job; returns the process exit code (0 ok, 1 run failed, 2 bad input)."""
    if cfg.workload.get("kind") == "broadcast":
        if cfg.engine != "tp" or cfg.tp < 2:
            print("error: workload=broadcast measures the control plane between ranks: needs engine=tp and tp >= 2",
                  file=sys.stderr)
            return 2
        return run_broadcast_job(cfg)
    if cfg.engine == "hf":
        return run_hf_job(cfg)
    return run_engine_job(cfg)


def run_hf_job(cfg: DictConfig) -> int:
    """``engine=hf``: the workload through transformers' generate on one device, one row per repeat."""
    device = resolve_device(cfg.device)
    dtype = cfg.dtype if cfg.dtype != "auto" else ("bfloat16" if device == "cuda" else "float32")
    row0 = {**base_row(cfg, device), "control": None, "dtype": dtype}
    try:
        if cfg.tp != 1:
            raise ConfigError("engine=hf runs on one device: use tp=1")
        results, path, work = prepare(cfg, device)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    repeat = 0
    try:
        for repeat in range(cfg.repeat):
            sampler = NvmlSampler([0] if device == "cuda" else [], cfg.nvml_interval_s).start()
            try:
                metrics_row, generated = run_hf(path, work, device, dtype, cfg.hf_batch_size, cfg.seed, cfg.progress)
            finally:
                sampler.stop()
            row = {**row0, "repeat": repeat, "status": "ok", **metrics_row, **sampler.summary(),
                   "gpu_name": sampler.gpu_name}
            print(f"  transformers generated {generated} tokens for {row['output_tokens']} requested "
                  f"({generated - row['output_tokens']} padding waste, not counted)")
            print_summary(row, append_row(results, COLUMNS, row, SCHEMA_VERSION))
        return 0
    except BaseException as e:
        return failed(results, row0, repeat, e)


def run_broadcast_job(cfg: DictConfig) -> int:
    """``workload=broadcast``: one row per payload, no model, no GPU."""
    try:
        results = check_results_dir(cfg)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    row0 = {**base_row(cfg, "cpu"), "model": None, "dtype": None}
    w = OmegaConf.to_container(cfg.workload)
    try:
        check_workload(w)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    options = control_options(cfg)
    code = 0
    for r in range(cfg.repeat):
        try:
            for result in run_broadcast(w, cfg.control.name, cfg.tp, options, cfg.llm.timeout_s, cfg.progress):
                row = {**row0, "repeat": r, "status": "ok", **result}
                print_broadcast(row, append_row(results, COLUMNS, row, SCHEMA_VERSION))
        except KeyboardInterrupt as e:
            append_row(results, COLUMNS, {**row0, "repeat": r, "status": "failed", "error": one_line(e)},
                       SCHEMA_VERSION)
            print("error: interrupted", file=sys.stderr)
            return 130
        except Exception as e:
            row = {**row0, "repeat": r, "status": "failed", "error": one_line(e)}
            append_row(results, COLUMNS, row, SCHEMA_VERSION)
            print(f"error: {one_line(e)}", file=sys.stderr)
            code = 1
    return code


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


def prepare(cfg: DictConfig, device: str) -> tuple[str, str, Workload]:
    """Everything that can be checked before a process is spawned: results directory, checkpoint,
    workload and whether its sequences fit ``llm.max_model_len``. Returns (results, model path, workload).

    Raises:
        ConfigError: any of these is wrong.
    """
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but CUDA is not available here (use device=cpu or auto)")
    results = check_results_dir(cfg)
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


def run_engine_job(cfg: DictConfig) -> int:
    """The engine on the configured workload, ``repeat`` timed runs after one untimed warm-up.

    Bad input (found before anything is spawned) is exit code 2 and no row; any later failure, Ctrl-C
    included, appends one failed row for the repeat it interrupted (exit code 1, or 130)."""
    device = resolve_device(cfg.device)
    row0 = base_row(cfg, device)
    llm, repeat, ok = None, 0, False
    try:
        results, path, work = prepare(cfg, device)
        options = OmegaConf.to_container(cfg.llm)
        async_scheduling = options.pop("async_scheduling")
        if not isinstance(async_scheduling, bool):
            raise ConfigError(f"llm.async_scheduling must be true or false, got {async_scheduling!r}")
        settings = dict(model=path, tensor_parallel_size=cfg.tp, control=cfg.control.name, device=device,
                        dtype=cfg.dtype, control_options=control_options(cfg), seed=cfg.seed, **options)
        llm, reused = get_engine(engine_key(**settings), lambda: LLM(**settings), cfg.reuse_engine)
        llm.config.async_scheduling = async_scheduling
        if reused:
            print(f"  reusing the engine of the previous job ({cfg.control.name}, tp={cfg.tp}, {cfg.model.name})")
        row0["dtype"] = llm.config.dtype
        row0["all_reduce"] = llm.runner.all_reduce
        if work.warmup:
            llm.generate([work.prompts[0][:64]], SamplingParams(temperature=0, ignore_eos=True,
                                                                max_tokens=min(16, work.params[0].max_tokens)))
        gpus = list(range(cfg.tp)) if device == "cuda" else []
        for repeat in range(cfg.repeat):
            sampler = NvmlSampler(gpus, cfg.nvml_interval_s)
            row = {**row0, "repeat": repeat, "status": "ok", **timed_run(llm, work, sampler, cfg.progress),
                   "gpu_name": sampler.gpu_name}
            print_summary(row, append_row(results, COLUMNS, row, SCHEMA_VERSION))
            SWEEP_ROWS.append(row)
            if device == "cuda":
                print_floor(row, work, llm)
        ok = True
        return 0
    except (ConfigError, ValueError, TypeError) as e:
        if llm is None:  # bad input: nothing was spawned, no row
            print(f"error: {e}", file=sys.stderr)
            return 2
        return failed(results, row0, repeat, e)
    except BaseException as e:
        if "results" not in locals():
            raise
        return failed(results, row0, repeat, e)
    finally:
        if not ok or not cfg.reuse_engine:
            release_engine()


def failed(results: str, row0: dict, repeat: int, e: BaseException) -> int:
    """Append the failed row of an interrupted or crashed run; returns the exit code (130 or 1)."""
    row = {**row0, "repeat": repeat, "status": "failed", "error": one_line(e)}
    print_summary(row, append_row(results, COLUMNS, row, SCHEMA_VERSION))
    print(f"error: {one_line(e)}", file=sys.stderr)
    return 130 if isinstance(e, KeyboardInterrupt) else 1
