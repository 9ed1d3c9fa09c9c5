"""What Hydra cannot know about a composed job, checked for every job before the first runs; and its notes."""

from __future__ import annotations

import dataclasses
import functools
import math
import os

from omegaconf import DictConfig, OmegaConf

from backends import ControlContext, get_control_plane, scope_fits
from engine import ConfigError, EngineConfig
from engine.config import CUDA_DTYPES, batch_tokens_problem, placement_problem, resolve_device
from runtime.cluster import make_control_plane
from runtime.launch import Launch

from .conf_paths import CONF_DIR, group_options, results_problem
from .conf_schema import LLM_DEFAULTS, VALUE_CHECKS, HarnessConfig, beyond_int64, problem_of
from .model_checks import check_model, model_shape
from .workloads import check_workload, effective_workload, given_workload, idle_gap_problem, request_shape

BROADCAST_READS = ("llm.timeout_s", "llm.startup_timeout_s")  # workload=broadcast's only llm settings


def _given(job: list[str]) -> list[str]:
    """The keys ``job``'s overrides set (prefixes ``+``, ``++`` stripped; deletions left out)."""
    return [a.split("=", 1)[0].lstrip("+") for a in job if "=" in a and not a.startswith("~")]


def given_twice(args: list[str]) -> list[str]:
    """A note for each key that the overrides ``args`` set more than once: Hydra applies the last."""
    keys = _given(args)
    last = {a.split("=", 1)[0].lstrip("+"): a.lstrip("+") for a in args if "=" in a and not a.startswith("~")}
    return [f"note: {k} is given {keys.count(k)} times: the last, {last[k]}, applies"
            for k in dict.fromkeys(k for k in keys if keys.count(k) > 1)]


def cli_message(message: str, llm_keys) -> str:
    """An engine ``ConfigError`` message, ``llm.`` put before the setting it names when that is one of ``llm_keys``."""
    name = message.split(" ", 1)[0].split("=", 1)[0]
    return f"llm.{message}" if name in llm_keys else message


_NONE = object()
_UNREAD = "unknown config key {!r}: nothing reads it (the keys: harness/conf_schema.py, conf/)"


def has_key(node, key: str) -> bool:
    """Whether config ``node`` has the dotted ``key`` (whatever its value)."""
    return OmegaConf.select(node, key, default=_NONE) is not _NONE


@functools.lru_cache(maxsize=64)  # per compose (one a command): every job of a sweep asks the same
def options_having(group: str, key: str, compose) -> list[str]:
    """The options of ``group`` whose composition has ``key`` (dotted, below the group)."""
    return [o for o in group_options(group) if has_key(compose([f"{group}={o}"])[group], key)]


def no_option(plane: str, option: str, compose) -> str:
    """The line refusing ``control.options.<option>``, which plane ``plane`` does not take, naming those it takes."""
    known = ", ".join(sorted(compose([f"control={plane}"]).control.options)) or "none"
    return f"control={plane} has no option {option!r} (its options: {known})"


def _check_workload(cfg: DictConfig, job: list[str], compose) -> str | None:
    """The workload as its kind checks it; a key its option lacks (``++``) as the first option having it checks it."""
    own = compose([a for a in job if a.split("=", 1)[0] == "workload"]).workload
    try:
        on_cpu = resolve_device(cfg.device) == "cpu"  # the command's keys win over the CPU scale-down, as in the job
        check_workload(given_workload(OmegaConf.to_container(cfg.workload), job), on_cpu)
        for key in (k.split(".", 1)[1] for k in _given(job) if k.startswith("workload.")):
            having = [] if has_key(own, key) else options_having("workload", key, compose)
            if having:  # untyped: the kind's check words the problem
                donor = OmegaConf.create(OmegaConf.to_container(compose([f"workload={having[0]}"]).workload))
                OmegaConf.update(donor, key, OmegaConf.select(cfg.workload, key), merge=False)
                check_workload(OmegaConf.to_container(donor))
    except ValueError as e:
        return str(e)
    return None


def _check_llm(cfg: DictConfig, given: list[str]) -> str | None:
    """The job's dtype, CPU threads and given ``llm.*`` settings, as the engine checks them without a checkpoint."""
    names = [k.split(".", 1)[1] for k in given if k.startswith("llm.")]  # each one of LLM_DEFAULTS by now
    checks = [{"dtype": cfg.dtype, "cpu_threads": cfg.cpu_threads or 0}] + [{name: cfg.llm[name]} for name in names]
    for settings in checks:
        if problem := problem_of(ConfigError, EngineConfig.check_settings, device=cfg.device, **settings):
            return cli_message(problem, set(names) & set(settings))
    return None


def _check_hf_dtype(cfg: DictConfig) -> str | None:
    """``engine=hf``'s dtype (transformers loads a checkpoint in any of the engine's CUDA dtypes, on either device);
    None for a job that builds no model."""
    if cfg.engine == "hf" and cfg.dtype != "auto" and cfg.dtype not in CUDA_DTYPES:
        return f"dtype {cfg.dtype!r} is not one engine=hf takes; use auto, {', '.join(sorted(CUDA_DTYPES))}"
    return None


def _check_control(cfg: DictConfig, compose) -> str | None:
    """The plane's options through its own check at the job's tp; one it does not take (``++``) by name."""
    if extra := sorted(set(cfg.control.options) - set(compose([f"control={cfg.control.name}"]).control.options)):
        return no_option(cfg.control.name, extra[0], compose)
    if cfg.workload.get("kind") == "broadcast" and (cfg.engine != "tp" or cfg.tp < 2):
        return "workload=broadcast measures the control plane between ranks: needs engine=tp and tp >= 2"
    if cfg.workload.get("kind") == "broadcast" and cfg.control.name == "ideal":
        return ("workload=broadcast with control=ideal: ideal has no transport to time alone (sweep the planes "
                "that send; ideal is the baseline of every other workload)")
    plane, options = get_control_plane(cfg.control.name), OmegaConf.to_container(cfg.control.options)
    problem = problem_of(ValueError, plane.check_options, cfg.tp, **options) or problem_of(
        ValueError, plane.check_timing, cfg.llm.timeout_s, **options)
    launch = Launch.from_env()
    if problem or launch is None or scope_fits(plane.scope_of(options), "torchrun", 1):
        return problem
    # a spawn-only plane under torchrun: the engine's own refusal (it builds no plane that does not fit), on
    # torchrun's nodes (the engine's probe may find fewer: several agents on one host)
    nodes = tuple(rank // launch.local_world_size for rank in range(launch.world_size))
    return problem_of(ConfigError, make_control_plane, cfg.control.name, options, cfg.tp, 1.0,
                      ControlContext(launcher="torchrun", node_of=nodes))


def picked_model(model: DictConfig, device: str) -> DictConfig:
    """A job's ``model`` node, ``model=auto`` resolved on ``device`` (``qwen3-0.6b`` on CUDA, else ``qwen3-tiny``)
    keeping a given ``model.path`` and ``model.preset.*``."""
    if model.name != "auto":
        return model
    name = "qwen3-0.6b" if resolve_device(device) == "cuda" else "qwen3-tiny"
    chosen = OmegaConf.load(os.path.join(CONF_DIR, "model", f"{name}.yaml"))
    return OmegaConf.merge(chosen, {"path": model.get("path"), "preset": model.get("preset") or {}})


def _check_requests(cfg: DictConfig, job: list[str], model: dict, builds_engine: bool) -> str | None:
    """``llm.max_num_batched_tokens`` below the longest sequence the engine admits; a request (prompt + max_tokens)
    longer than ``llm.max_model_len``, the model's positions or a given ``llm.num_kvcache_blocks``; under
    ``control=ideal``, a gap of the serve trace (from the workload and the seed alone) outlasting ``llm.timeout_s``."""
    shape, llm = model_shape(model), cfg.llm
    if builds_engine and (problem := batch_tokens_problem(llm.max_num_batched_tokens, llm.max_model_len, shape)):
        return cli_message(problem, {"max_num_batched_tokens"})  # as the engine words it
    if cfg.workload.get("kind") not in ("random", "fixed", "serve"):
        return None
    w = effective_workload(given_workload(OmegaConf.to_container(cfg.workload), job), resolve_device(cfg.device))
    _, _, prompt, output = request_shape(w)
    limit = min(llm.max_model_len, shape["max_position_embeddings"])
    if prompt + output > limit:
        return (f"workload {w['name']} asks for sequences of up to {prompt + output} tokens ({prompt} of prompt + "
                f"{output} output); the limit is {limit} (llm.max_model_len={llm.max_model_len}, the model's "
                f"max_position_embeddings={shape['max_position_embeddings']})")
    need = math.ceil((prompt + output) / llm.kvcache_block_size)
    if cfg.engine == "tp" and 0 < llm.num_kvcache_blocks < need:  # engine=hf reads no llm.*
        return (f"workload {w['name']} asks for sequences of up to {prompt + output} tokens: {need} KV blocks of "
                f"llm.kvcache_block_size={llm.kvcache_block_size}, more than llm.num_kvcache_blocks="
                f"{llm.num_kvcache_blocks}")
    return idle_gap_problem(w, cfg.seed, cfg.control.name, cfg.tp, llm.timeout_s)


def _strict_bools(cfg: DictConfig, job: list[str]) -> str | None:
    """A switch set to anything but true or false: OmegaConf would read ``yes``, ``on`` or ``2`` as true."""
    for arg in job:
        key, _, raw = arg.lstrip("+").partition("=")
        value = OmegaConf.select(cfg, key, default=None)  # an interpolation resolved: its value is what counts
        if isinstance(value, bool) and "${" not in raw and raw.lower() not in ("true", "false"):
            return f"{key} must be true or false, got {raw!r}"
    return None


def _unknown_keys(cfg: DictConfig, job: list[str], compose) -> str | None:
    """A key the schema or the group's options lack (``+foo=1``, ``+model.pth=x`` add one): nothing would read it.
    Workload keys: ``_unknown_workload_keys``."""
    if not isinstance(cfg.llm, DictConfig):  # HarnessConfig.llm is untyped: the defaults list places LlmConfig
        return "llm holds the engine's settings: set one with llm.<key>=value (the keys: harness/conf_schema.py)"
    known = {f.name for f in dataclasses.fields(HarnessConfig)}
    extra = [k for k in cfg if k not in known] + [f"llm.{k}" for k in cfg.llm if k not in LLM_DEFAULTS]
    for key in _given(job):
        group, _, rest = key.partition(".")
        if key in ("control.name", "model.name", "workload.name", "workload.kind"):
            return (f"{key} comes with the option: choose one with {group}=<name> (available: "
                    f"{', '.join(group_options(group))}); label runs with tag=...")
        if rest and group in ("model", "control") and rest.split(".")[0] not in ("preset", "options"):
            extra += [] if has_key(compose([f"{group}={cfg[group].name}"])[group], rest) else [key]
    return _UNREAD.format(extra[0]) if extra else None


def _unknown_workload_keys(job: list[str], compose) -> str | None:
    """A ``workload.*`` key no workload has (``+workload.foo=1``); one of another workload passes (a sweep's ``++``:
    job_setup notes it). After ``_check_workload``, whose words for its own keys (an unknown SLO) are better."""
    extra = [k for k in _given(job) if k.startswith("workload.") and not options_having("workload", k[9:], compose)]
    return _UNREAD.format(extra[0]) if extra else None


def run_folders(cfg: DictConfig) -> dict[str, str]:
    """The folders of ``results_dir`` a job writes a run's files into: {name: what goes there}."""
    engine_runs = cfg.engine == "tp" and cfg.workload.get("kind") != "broadcast"
    folders = {"runs": "the run files", "requests": "the per-request files (save_requests=true)",
               "steps": "the step logs (step_log=true)", "traces": f"the traces (profile={cfg.profile})"}
    writes = {"runs": True, "requests": cfg.save_requests and cfg.workload.get("kind") == "serve",
              "steps": cfg.step_log and engine_runs, "traces": cfg.profile != "none" and engine_runs}
    return {name: what for name, what in folders.items() if writes[name]}


def _check_where(cfg: DictConfig, builds_engine: bool) -> str | None:
    """Where the job runs (torchrun, CUDA and its GPUs for an engine, ``engine=hf``'s one device and offline batches),
    and where its rows go."""
    try:
        launch = Launch.from_env()
    except ConfigError as e:
        return str(e)
    if launch is not None and cfg.engine == "hf":
        return "engine=hf runs on one device: do not launch it with torchrun"
    if problem := placement_problem(cfg.device, cfg.tp, launch, count_gpus=builds_engine):
        return problem
    if cfg.engine == "hf" and cfg.tp != 1:
        return "engine=hf runs on one device: use tp=1"
    if cfg.engine == "hf" and cfg.workload.get("kind") == "serve":
        return f"engine=hf runs offline batches through generate(): workload={cfg.workload.name} needs engine=tp"
    rank0 = os.environ.get("RANK", "0") == "0"
    return results_problem(cfg.results_dir, cfg.results_file, run_folders(cfg)) if rank0 else None


def check_job(cfg: DictConfig, job: list[str], compose) -> str | None:
    """The first problem of one composed job (``job``: its overrides) as one line, or None."""
    given = _given(job)
    values = (VALUE_CHECKS[k](k, OmegaConf.select(cfg, k)) for k in given if k in VALUE_CHECKS)
    builds_engine = cfg.engine == "tp" and cfg.workload.get("kind") != "broadcast"
    tp = cfg.tp if builds_engine else None
    preset_given = any(a.lstrip("+~").startswith("model.preset.") for a in job)
    if problem := (_strict_bools(cfg, job) or _unknown_keys(cfg, job, compose) or next(filter(None, values), None)
                   or beyond_int64(cfg, given) or _check_where(cfg, builds_engine) or _check_workload(cfg, job, compose)
                   or _unknown_workload_keys(job, compose) or (_check_llm(cfg, given) if builds_engine
                                                               else _check_hf_dtype(cfg))):
        return problem
    model = OmegaConf.to_container(picked_model(cfg.model, cfg.device))
    return (check_model(model, tp, cfg.device, preset_given) or _check_control(cfg, compose)
            or _check_requests(cfg, job, model, builds_engine))


def job_notes(cfg: DictConfig, job: list[str]) -> list[str]:
    """Notes on what ``job`` (composed: ``cfg``) sets that nothing reads, or past the model's vocabulary."""
    keys = _given(job)
    engine_keys = [k for k in keys if k.startswith(("llm.", "control.")) or k == "control"]
    cpu = [k for k in keys if k.startswith("workload.cpu.")]
    no_steps = "engine=hf" if cfg.engine == "hf" else f"workload={cfg.workload.name}"
    why = {"save_requests": ("requests", f"workload={cfg.workload.name} has no per-request file (a serve workload "
                                         f"has one, e.g. workload=serve)"),
           "step_log": ("steps", f"{no_steps} runs no engine steps to log"),
           "profile_steps": ("traces", "profile=none traces nothing (profile=torch does)" if cfg.profile == "none"
                             else f"{no_steps} writes no trace")}
    notes = [f"note: {why[k][1]}: nothing reads {k}" for k in why if k in keys and cfg[k] and why[k][0] not in
             run_folders(cfg)]
    if engine_keys and cfg.engine == "hf":
        notes.append(f"note: engine=hf runs transformers' generate in one process, with no control plane: nothing "
                     f"reads {', '.join(engine_keys)}")
    unread = [k for k in keys if k == "dtype" or k.split(".")[0] in ("model", "llm") and k not in BROADCAST_READS]
    if cfg.workload.get("kind") == "broadcast" and unread:
        notes.append(f"note: workload=broadcast times the control plane with no model: nothing reads "
                     f"{', '.join(unread)}")
    if cpu and not cfg.workload.get("scale_on_cpu"):
        notes.append(f"note: workload={cfg.workload.name} does not scale on CPU (scale_on_cpu=false): nothing reads "
                     f"{', '.join(cpu)}")
    if "workload.burstiness" in keys and "workload.request_rate" in keys and cfg.workload.request_rate == math.inf:
        notes.append(f"note: workload.burstiness={cfg.workload.burstiness:g} shapes the gaps between arrivals; at "
                     f"request_rate=inf there are none (every request at t=0)")
    notes += given_twice(job)
    capped = "llm.max_model_len" in keys and cfg.engine == "tp" and cfg.workload.get("kind") != "broadcast"
    if "workload.max_token_id" in keys or capped:
        model = OmegaConf.to_container(picked_model(cfg.model, cfg.device))
        shape, top, longest = model_shape(model), cfg.workload.get("max_token_id", 0), cfg.llm.max_model_len
        if "workload.max_token_id" in keys and top >= shape["vocab_size"]:
            notes.append(f"note: workload.max_token_id={top} is past the vocabulary of model={model['name']} "
                         f"({shape['vocab_size']} ids): token ids go up to {shape['vocab_size'] - 1}")
        if capped and longest > (limit := shape["max_position_embeddings"]):  # nano-vllm caps it too
            notes.append(f"note: llm.max_model_len={longest} is past the {limit} positions of model={model['name']}: "
                         f"the engine uses {limit}")
    return notes


ENGINE_FREE = ("workload", "repeat", "tag", "results_dir", "results_file", "progress", "save_requests", "step_log",
               "nvml_interval_s", "hydra")  # keys (and llm.async_scheduling) a reused engine does not depend on


def reuse_note(argv: list[str], jobs: list[list[str]], compose) -> str | None:
    """A note when the sweep's order starts more engines than needed (Hydra varies the last override fastest)."""

    def engine_of(job):
        keys = [a.lstrip("+~").split("=", 1)[0] for a in job]
        return [a for a, k in zip(job, keys) if k.split(".")[0] not in ENGINE_FREE and k != "llm.async_scheduling"]

    cfg = compose([a for a in jobs[0] if a.lstrip("+~").split("=", 1)[0] in ("engine", "reuse_engine")])
    if not cfg.reuse_engine or cfg.engine != "tp" or Launch.from_env() is not None:
        return None
    keys = [engine_of(j) for j in jobs]
    starts, needed = 1 + sum(a != b for a, b in zip(keys, keys[1:])), len({tuple(k) for k in keys})
    if starts == needed:
        return None
    first = [a for a in argv if not a.startswith("-") and engine_of([a])]
    better = " ".join(["-m", *first, *[a for a in argv if not a.startswith("-") and a not in first]])
    return (f"note: this order starts an engine {starts} times where {needed} would do (Hydra varies the last "
            f"override fastest): python -m harness {better}")
