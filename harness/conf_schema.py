"""The configuration's schema (``llm`` from ``engine.EngineConfig``, each plane's options from its constructor) in
Hydra's ConfigStore; ``VALUE_CHECKS``: what the types do not express, ``check(key, value) -> message | None``."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, Container, OmegaConf

from backends import available, get_control_plane
from common import is_int, is_number
from engine import ConfigError
from engine.config import MAX_SEED, EngineConfig
from engine.profiling import parse_window, profile_problem  # the engine's rules, written once

# set from the harness's own keys, or Python-API only (launcher, fault_injection, cpu_kvcache_bytes): not llm.*
NOT_CLI = {"model", "tensor_parallel_size", "control", "control_options", "device", "dtype", "seed", "launcher",
           "cpu_threads", "fault_injection", "profile", "profile_steps", "cpu_kvcache_bytes", "hf_config"}
_TYPES = {"int": int, "float": float, "bool": bool, "str": str}
LLM_FIELDS = [f for f in dataclasses.fields(EngineConfig) if f.name not in NOT_CLI]
LLM_DEFAULTS = {f.name: f.default for f in LLM_FIELDS}
LlmConfig = dataclasses.make_dataclass(
    "LlmConfig", [(f.name, _TYPES[f.type], dataclasses.field(default=f.default)) for f in LLM_FIELDS])


@dataclasses.dataclass
class HarnessConfig:
    """The top-level keys of ``python -m harness``; the groups (control, model, workload) come from conf/."""

    engine: str = "tp"  # tp = this project's engine; hf = transformers' generate on the same checkpoint (a peer)
    tp: int = 1  # tensor-parallel size = number of processes (GPUs)
    device: str = "auto"  # auto = cuda when available, else cpu
    dtype: str = "auto"  # auto = bfloat16 on cuda, float32 on cpu
    seed: int = 0  # workload draw, preset weights and sampling
    repeat: int = 1  # timed repeats of the workload in one job (one CSV row each)
    results_dir: str = "results"  # relative to the directory you run from
    results_file: str = "runs.csv"
    nvml_interval_s: float = 0.1  # GPU sampling period
    progress: bool = True  # tqdm progress bars, drawn only when stderr is a terminal (not into a log or pipe)
    hf_batch_size: int = 256  # engine=hf: requests per transformers generate() call
    tag: str | None = None  # a label of your own for this job's rows (e.g. the version of the code measured)
    cpu_threads: int | None = None  # CPU runs: torch threads per rank (None or 0: cores / tp)
    reuse_engine: bool = True  # a sweep's next job reuses the engine when only the workload or async differ
    save_requests: bool = False  # workload=serve: one JSON line per request to <results_dir>/requests/
    step_log: bool = False  # each timed run's per-step timings to <results_dir>/steps/<run_id>.csv
    profile: str = "none"  # torch: a Chrome trace per rank of each timed run to <results_dir>/traces/, NVTX on CUDA
    profile_steps: str | None = None  # the timed run's steps to trace: FIRST-LAST (from 0) or N; None = all
    llm: Any = MISSING  # LlmConfig, placed by the defaults list
    control: Any = MISSING
    model: Any = MISSING
    workload: Any = MISSING


@dataclasses.dataclass
class FixedWorkload:
    """``kind: fixed`` (workload=latency): ``num_seqs`` prompts of ``input_len`` tokens, ``output_len`` each."""

    name: str = MISSING
    kind: str = "fixed"
    num_seqs: int = MISSING
    input_len: int = MISSING
    output_len: int = MISSING
    iterations: int = MISSING
    max_token_id: int = MISSING
    warmup: bool = True
    scale_on_cpu: bool = True
    cpu: dict[str, Any] = dataclasses.field(default_factory=dict)  # values that replace these on a CPU device


@dataclasses.dataclass
class _Drawn:
    """What bench and serve share: prompt and output lengths drawn in [min, max], random token ids."""

    name: str = MISSING
    kind: str = MISSING
    min_input_len: int = MISSING
    max_input_len: int = MISSING
    min_output_len: int = MISSING
    max_output_len: int = MISSING
    max_token_id: int = MISSING
    temperature: float = MISSING
    ignore_eos: bool = True
    warmup: bool = True
    scale_on_cpu: bool = True
    cpu: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RandomWorkload(_Drawn):
    """``kind: random`` (workload=bench, smoke): nano-vllm's benchmark, ``num_seqs`` requests at t=0."""

    kind: str = "random"
    num_seqs: int = MISSING


@dataclasses.dataclass
class Slo:
    """Goodput's bounds in ms (None: no bound)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None


@dataclasses.dataclass
class ServeWorkload(_Drawn):
    """``kind: serve``: ``num_prompts`` requests drawn as bench draws them, arriving at ``request_rate``."""

    kind: str = "serve"
    num_prompts: int = MISSING
    request_rate: float = MISSING  # req/s; inf: all at t=0
    burstiness: float = 1.0  # Gamma shape of the gaps; 1.0 = Poisson
    max_concurrency: int | None = None
    slo: Slo = dataclasses.field(default_factory=Slo)


@dataclasses.dataclass
class BroadcastWorkload:
    """``kind: broadcast``: the control plane alone, one row per payload (harness/broadcast.py)."""

    name: str = MISSING
    kind: str = "broadcast"
    decode_batches: list[int] = MISSING
    decode_context: int = MISSING
    prefill_batches: list[Any] = MISSING  # [num_seqs, new tokens each] pairs
    raw_bytes: list[int] = MISSING
    kvcache_block_size: int = MISSING
    warmup: int = MISSING
    messages: int = MISSING
    min_messages: int = MISSING
    max_bytes_per_payload: int = MISSING
    gap_us: int = MISSING
    scale_on_cpu: bool = False


WORKLOADS = {"fixed": FixedWorkload, "random": RandomWorkload, "serve": ServeWorkload, "broadcast": BroadcastWorkload}


def plane_schema(name: str) -> type:
    """``control=<name>``'s node: its ``name`` and ``options`` (the plane's constructor's keyword arguments)."""
    cls = get_control_plane(name)
    signature = inspect.signature(cls.__init__).parameters
    params = [signature[n] for n in cls.option_names() if n != "inner_options"]  # inner_options: Python API only
    options = dataclasses.make_dataclass(f"{cls.__name__}Options", [
        (p.name, _TYPES[p.annotation], dataclasses.field(default=p.default)) for p in params])
    return dataclasses.make_dataclass(f"{cls.__name__}Config", [("name", str, dataclasses.field(default=name)), (
        "options", options, dataclasses.field(default_factory=options))])


def problem_of(error: type[Exception], check, *args, **kwargs) -> str | None:
    """The message of the ``error`` that ``check(*args, **kwargs)`` raises, or None when it raises none."""
    try:
        check(*args, **kwargs)
    except error as e:
        return str(e)
    return None


def _must_be(needs: str, ok):
    """A check of ``VALUE_CHECKS``: None when ``ok(value)``, else "<key> must be <needs>, got '<value>'" (a float
    as short as written: '0', not '0.0')."""
    def check(key: str, v) -> str | None:
        whole = isinstance(v, float) and v.is_integer() and abs(v) < 1e16
        return None if ok(v) else f"{key} must be {needs}, got {'' if v is None else str(int(v) if whole else v)!r}"

    return check


def _choice(*allowed: str):
    return _must_be(f"one of {', '.join(allowed)}", lambda v: v in allowed)


def _not_empty(hint: str):  # null is the default of model.path; results_dir's type refuses it
    return lambda key, v: None if v != "" else f"{key} is empty: {hint}"


def _file_name(key: str, v) -> str | None:  # the rows go inside results_dir, never elsewhere through a path
    if v in (None, ""):
        return f"{key} is empty: give a file name (default: runs.csv)"
    if not str(v).isprintable():  # a newline or a tab in a file name breaks every line-based tool
        return f"{key} must be a file name of printable characters, got {str(v)!r}"
    if len(str(v).encode()) > 230:  # a file name holds 255 bytes: room for its fallback's .unwritten-<run_id>
        return f"{key} is {len(str(v).encode())} bytes long: at most 230, as a fallback file adds 23"
    if "/" in str(v) or str(v) in (".", ".."):
        return f"{key} must be a file name inside results_dir, got {str(v)!r} (set results_dir for the directory)"
    if str(v).startswith("."):  # glob's *.csv leaves a hidden file out
        return f"{key} must not start with '.' (harness.analyze DIR would not see it), got {str(v)!r}"
    return None if str(v).endswith(".csv") else f"{key} must end in .csv (harness.analyze DIR reads *.csv), got {v!r}"


_INT_AT_LEAST_1 = _must_be("an integer >= 1", lambda v: is_int(v) and v >= 1)
VALUE_CHECKS = {"tp": _INT_AT_LEAST_1, "repeat": _INT_AT_LEAST_1, "hf_batch_size": _INT_AT_LEAST_1,
                "seed": _must_be("an integer in [0, 2^63 - 1]", lambda v: is_int(v) and 0 <= v <= MAX_SEED),
                "device": _choice("auto", "cpu", "cuda"), "engine": _choice("tp", "hf"),
                "nvml_interval_s": _must_be("a number > 0", lambda v: is_number(v) and v > 0),
                "model.path": _not_empty("give a checkpoint directory, or leave it out for the preset's weights"),
                "results_dir": _not_empty("give a directory (default: results)"), "results_file": _file_name,
                "tag": _must_be("one line of printable characters", lambda v: v is None or str(v).isprintable()),
                "profile": lambda key, v: profile_problem(v),
                "profile_steps": lambda key, v: problem_of(ConfigError, parse_window, v)}


def beyond_int64(cfg, keys: list[str]) -> str | None:
    """An integer at ``keys`` of the composed ``cfg`` (or inside them) above a signed int64: no results column holds
    it (``harness.analyze`` failed on ``workload.max_concurrency=99999999999999999999``'s row), nor does torch or C.
    A negative one is left to each key's own least value."""
    given = [(key, OmegaConf.select(cfg, key, default=None)) for key in keys]
    stack = [(key, OmegaConf.to_container(v) if isinstance(v, Container) else v) for key, v in given]
    while stack:
        path, v = stack.pop()
        if isinstance(v, (dict, list)):
            stack += [(f"{path}.{k}" if isinstance(v, dict) else f"{path}[{k}]", x)
                      for k, x in (v.items() if isinstance(v, dict) else enumerate(v))]
        elif is_int(v) and v > 2**63 - 1:
            return f"{path}={v} is beyond 2^63 - 1, the largest integer a results column holds"
    return None


# Hydra's ConfigStore gets the schemas on import, before Hydra composes conf/config.yaml; a plane's and a
# workload kind's under a name, not in a group, so that --help lists no group a user could not pick
ConfigStore.instance().store(name="harness_schema", node=HarnessConfig)
ConfigStore.instance().store(name="llm_schema", node=LlmConfig)
for _plane in available():
    ConfigStore.instance().store(name=f"control_schema_{_plane}", node=plane_schema(_plane))
for _kind, _node in WORKLOADS.items():
    ConfigStore.instance().store(name=f"workload_schema_{_kind}", node=_node)
