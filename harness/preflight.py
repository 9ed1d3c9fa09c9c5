"""A command checked before its first job runs: its flags and overrides (``command_line``), then every job of a
sweep composed with Hydra's compose API; Hydra's error becomes one line, ``job_checks`` checks what Hydra cannot
know."""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import sys

import hydra
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.types import ValueType
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

from backends import get_control_plane
from common import first_line
from engine import ConfigError, EngineConfig

from .command_line import check_options, engine_defaults, overrides_of, parse
from .conf_paths import CONF_DIR, GROUPS, cannot_write, group_options
from .conf_schema import VALUE_CHECKS, problem_of  # the import registers the schema before Hydra composes
from .job_checks import check_job, cli_message, given_twice, has_key, job_notes, no_option, options_having, reuse_note


@contextlib.contextmanager
def hydra_compose():
    """Hydra's compose API over ``conf/``: yields ``compose(overrides) -> DictConfig``."""
    def compose(overrides) -> DictConfig:
        cfg = hydra.compose("config", overrides=list(overrides), return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)  # ${hydra:runtime.cwd} and the like resolve as in the job
        with open_dict(cfg):
            del cfg["hydra"]
        return cfg

    GlobalHydra.instance().clear()  # initialize_config_dir puts this cleared state back on exit
    before = HydraConfig.instance().cfg
    try:
        with hydra.initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            yield compose
    finally:
        HydraConfig.instance().cfg = before  # a composition's is not the job's (its output dir is unset)


def jobs_of(parsed: list) -> list[list[str]]:
    """The overrides of each job of a sweep (``parsed``: its ``Override``s), as Hydra's basic sweeper splits it.
    Raises ValueError: a sweep of no value (a glob() that matches no option)."""
    loader = GlobalHydra.instance().config_loader()  # glob() lists a group's options through it
    for o in parsed:
        o.config_loader = loader
        if o.value_type == ValueType.GLOB_CHOICE_SWEEP and o.key_or_group not in GROUPS:
            raise ValueError(f"{o.input_line}: glob() picks options of a config group ({', '.join(GROUPS)}); "
                             f"sweep {o.key_or_group} with a,b,c, choice() or range()")
        if o.is_discrete_sweep() and not list(o.sweep_string_iterator()):
            options = group_options(o.key_or_group)
            raise ValueError(f"{o.input_line} selects nothing" + (
                f"; options of {o.key_or_group}: {', '.join(options)}" if options else ": the sweep has no value"))
    bare = {f"~{o.key_or_group}=null": f"~{o.key_or_group}" for o in parsed if o.is_delete() and o.value() is None}
    return [[bare.get(a, a) for a in job] for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def for_hydra(argv: list[str], compose) -> list[str]:
    """``argv`` with ``++`` on a ``<group>.<key>=v`` whose key the group's default lacks: Hydra composes a sweep's
    default option first (``model=auto`` has no preset) and would stop with "Key ... is not in struct"."""
    keys = [a.split("=", 1)[0] for a in argv if "=" in a and a.split(".", 1)[0] in GROUPS and a[0] not in "+~-"]
    if not keys:  # each one dotted: <group>.<key>
        return argv
    base = compose([a for a in argv if "=" in a and a.split("=", 1)[0] in GROUPS and not parse(a).is_sweep_override()])
    missing = {k for k in keys if not has_key(base, k)}
    return [f"++{a}" if a.split("=", 1)[0] in missing else a for a in argv]


JOB_COUNT = 0  # the jobs of the command check_command last passed, for a sweep's summary


def _choice(job: list[str], group: str, compose) -> str:
    """The option of ``group`` that ``job`` selects (its last ``group=...``, else the default)."""
    given = [a.split("=", 1)[1] for a in job if a.split("=", 1)[0] == group]
    return given[-1] if given else compose([])[group].name


def _suggest(key: str, cfg) -> str:
    """`` (did you mean 'x'?)`` for the key of ``cfg`` nearest to a mistyped ``key``, else ""."""
    parent, _, last = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
    known = [str(k) for k in node] if isinstance(node, DictConfig) else []
    starts = [k for k in known if k.startswith(last)] if len(last) >= 3 else []  # slo.ttft: ttft_ms
    close = starts if len(starts) == 1 else difflib.get_close_matches(last, known, n=1, cutoff=0.75)
    return f" (did you mean {(parent + '.' if parent else '') + close[0]!r}?)" if close else ""


def hydra_message(e: Exception, job: list[str], compose) -> str:
    """Hydra's error composing ``job`` as one line, in the words of the check it failed, else Hydra's first line."""
    text = str(e).strip()
    if m := re.search(r"Could not find '([^']*)'\s+Available options in '([^']*)':((?:\n\t.*)+)", text):
        return f"unknown {m[2]} {m[1][len(m[2]) + 1:]!r}; available: {', '.join(m[3].split())}"
    m = re.match(r"Could not override '([^']+)'", text)
    if m and isinstance(e.__cause__, (ConfigAttributeError, ConfigKeyError)):
        inner = e.__cause__.full_key or ""
        key = inner if inner.startswith(m[1] + ".") else m[1]  # llm={a:1}: the key inside, llm.a
        head, _, rest = key.partition(".")
        if head == "workload" and (having := options_having("workload", rest, compose)):
            return (f"workload={_choice(job, head, compose)} has no key {rest!r} (pick a workload that has it, "
                    f"e.g. workload={having[0]}, or add it with ++{key}=...)")
        if key.startswith("control.options."):
            return no_option(_choice(job, "control", compose), key.split(".", 2)[2], compose)
        chosen = compose([a for a in job if a.split("=", 1)[0] in GROUPS])
        return f"unknown config key {key!r}{_suggest(key, chosen)} (the keys: harness/conf_schema.py, conf/)"
    if m := re.match(r"Could not append to config. An item is already at '([^']+)'", text):
        head = m[1].split(".", 1)[0]
        where = f" in {head}={_choice(job, head, compose)}" if head in GROUPS else ""
        value = next((a.split("=", 1)[1] for a in job if a.lstrip("+").split("=", 1)[0] == m[1]), "...")
        return (f"{m[1]} exists already{where}: set it without the + ({m[1]}={value}), or with ++ where some of "
                f"the selected options lack it")
    m = re.match(r"Error merging override ([^=]+)=(.*)", text)
    if m and isinstance(e.__cause__, ValidationError):  # a value of the wrong type for the schema
        return _type_message(m[1].lstrip("+"), m[2], e.__cause__, job, compose)
    return first_line(e) or type(e).__name__


def _type_message(key: str, raw: str, error: Exception, job: list[str], compose) -> str:
    """A value the schema's type refuses, in its own check's words (the engine's, the plane's, ``VALUE_CHECKS``)."""
    inner, text = getattr(error, "full_key", None) or key, str(error)
    if inner.startswith(key + "."):  # key={a:1,b:x}: name the key inside, b, and its value
        key, raw = inner, (m[1] if (m := re.match(r"Value '(.*)' of type", text)) else raw)
    if "is not a subclass of" in text:  # a value given to a group of keys (workload.slo=200)
        rest = [a for a in job if a.lstrip("+").split("=", 1)[0] != key]
        keys = list(OmegaConf.select(compose(rest), key) or ()) or ["..."]
        several = f" or several ({key}={{{keys[0]}:...,{keys[1]}:...}})" if len(keys) > 1 else ""
        return f"{key} is a group of keys ({', '.join(keys)}): set one ({key}.{keys[0]}=...){several}, got {raw!r}"
    if "not Optional" in text:
        return f"{key} cannot be null"
    if key.startswith("hydra.") and (first := first_line(error)):  # Hydra's own schema: its words
        return f"{key}: {first}"
    if key.startswith("llm."):
        problem = problem_of(ConfigError, EngineConfig.check_settings, **{key[4:]: None if raw == "null" else raw})
        problem = problem and cli_message(problem, {key[4:]})
    elif key.startswith("control.options."):
        plane = _choice(job, "control", compose)
        options = {**compose([f"control={plane}"]).control.options, key.split(".", 2)[2]: raw}
        problem = problem_of(ValueError, get_control_plane(plane).check_options, 2, **options)
    else:
        problem = VALUE_CHECKS[key](key, raw) if key in VALUE_CHECKS else None
    if problem:
        return problem
    kinds = [("Integer", "a list of integers" if raw.startswith("[") else "an integer"), ("Float", "a number"),
             ("bool", "true or false"), ("ListConfig", "a list"), ("str", "a string")]
    kind = next((k for word, k in kinds if word in text), "of the schema's type (harness/conf_schema.py)")
    return f"{key} must be {kind}, got {raw!r}"


_HYDRA_KEYS = ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir", "hydra.job.name")


def _hydra_dirs(job: list[str]) -> str | None:
    """A ``hydra.run.dir``, ``sweep.dir``, ``sweep.subdir`` or ``job.name`` of ``job`` (just composed) that does not
    resolve, or a directory of them that cannot be made; Hydra fails on either after the sweep has begun."""
    keys = [k for k in _HYDRA_KEYS if k in {a.lstrip("+").split("=", 1)[0] for a in job}]
    if not keys:
        return None
    root = hydra.compose("config", overrides=job, return_hydra_config=True)  # they may name the job's keys
    OmegaConf.set_readonly(root.hydra, False)
    root.hydra.job.num = 0  # a sweep sets it per job
    for key in keys:
        try:
            value = OmegaConf.select(root, key)
        except Exception as e:  # ${oops}, ${oc.env:UNSET}, ...
            return f"{key}: {type(e).__name__}: {first_line(e)}"
        where = os.path.join(root.hydra.sweep.dir, value) if key == "hydra.sweep.subdir" else value
        if key != "hydra.job.name" and (reason := cannot_write(str(where))):
            return f"{key}={value}: cannot create the directory: {reason}"
    return None


def _check_job(job: list[str], compose, notes: list[str]) -> str | None:
    """One job's first problem as one line (an error composing or checking it too), else its notes onto ``notes``."""
    deleted = next((a[1:].split("=", 1)[0] for a in job if a.startswith("~")), None)  # ~llm.KEY: taken out before
    try:
        if deleted is not None and not has_key(compose([a for a in job if not a.startswith("~")]), deleted):
            return f"~{deleted}: no such key to delete (not in the configuration of this job)"
        if deleted is not None:  # the schema keeps every key
            return (f"~{deleted}: every key of the configuration stays (harness/conf_schema.py); set it instead "
                    f"({deleted}=...)")
        cfg = compose(job)
    except Exception as e:  # Hydra's and OmegaConf's errors alike
        return hydra_message(e, job, compose)
    if problem := _hydra_dirs(job):
        return problem
    try:
        problem = check_job(cfg, job, compose)
        if not problem:
            notes += job_notes(cfg, job)
        return problem
    except Exception as e:  # an interpolation that does not resolve (${oc.env:...}), ...
        where = f" (in {e.full_key})" if getattr(e, "full_key", None) else ""
        return f"{type(e).__name__}: {first_line(e)}{where}"


def check_command(argv: list[str]) -> tuple[str | None, list[str]]:
    """(the first problem of the command as one line, or None; ``argv`` as Hydra must get it)."""
    try:
        overrides, package = overrides_of(argv)
        argv, notes = engine_defaults(argv, overrides)
        overrides = [a for a in overrides if a in argv]
        parsed = [parse(a) for a in overrides]
        check_options(parsed)
    except ValueError as e:
        return str(e), argv
    sweep = next((a for a, o in zip(overrides, parsed) if o.is_sweep_override()), None)
    multirun = "-m" in argv or "--multirun" in argv
    if sweep and not multirun:
        return f"{sweep} is a sweep: add -m (python -m harness -m {sweep} ...)", argv
    with hydra_compose() as compose:
        try:
            jobs = jobs_of(parsed) if multirun else [overrides]
        except ValueError as e:
            return str(e), argv
        except Exception as e:  # interval(): the basic sweeper cannot list it
            return f"{first_line(e)} (the basic sweeper takes a,b,c, choice(), range() and glob())", argv
        global JOB_COUNT
        JOB_COUNT = len(jobs)
        for job in jobs:
            job = [f"++{a}" if a.startswith("model.preset.") and _choice(job, "model", compose) == "auto" else a
                   for a in job]  # model=auto has no preset: job_setup puts these onto its pick
            if problem := _check_job(job, compose, notes):
                return problem, argv
        if package and not has_key(compose(jobs[0]), package):
            return f"--package {package}: no such key in the configuration (e.g. llm, workload, control.options)", argv
        if multirun and (note := reuse_note(argv, jobs, compose)):
            notes.append(note)
        notes += given_twice(overrides) if multirun else []  # a sweep's jobs hold the last value alone
        for note in dict.fromkeys(notes):
            print(note, file=sys.stderr)
        argv = for_hydra(argv, compose)
    return None, argv  # signals.AT_ONCE (install's) stays set through Hydra's composition: the first job clears it
