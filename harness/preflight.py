"""A command checked before its first job runs: its flags and overrides, then every job of a sweep composed with
Hydra's compose API; Hydra's error becomes one line, ``job_checks`` checks what Hydra cannot know."""

from __future__ import annotations

import contextlib
import difflib
import re
import sys

import hydra
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ValueType
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

from backends import get_control_plane
from engine import ConfigError, EngineConfig

from .conf_paths import CONF_DIR, GROUPS, cannot_write, group_options
from .conf_schema import LLM_DEFAULTS, VALUE_CHECKS, problem_of  # the import registers the schema before Hydra composes
from .job_checks import check_job, cli_message, given_twice, has_key, job_notes, no_option, options_having, reuse_note
from .signals import AT_ONCE

_CFG, _INFO = ("job", "hydra", "all"), ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")
_VALUE_FLAGS = {"--cfg": _CFG, "-c": _CFG, "--info": _INFO, "-i": _INFO, **dict.fromkeys(
    ["--package", "-p", "--experimental-rerun"])}
# the checks before any job compose conf/ as installed: a primary config from elsewhere would go unchecked
_OTHER_CONFIG = ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd")
_MODES = {"--run": "r", "-r": "r", "--multirun": "m", "-m": "m", "--cfg": "c", "-c": "c", "--info": "i", "-i": "i"}
_FLAGS = {"-m", "--multirun", "--help", "-h", "--hydra-help", "--version", "--resolve", "--run", "-r", *_VALUE_FLAGS}


def overrides_of(argv: list[str]) -> list[str]:
    """The command's overrides. Raises ValueError: a flag that is not Hydra's, or that Hydra would misread."""
    if "--hydra-help" in argv and any(a[:1] not in "-" for a in argv):  # Hydra composes its own config alone
        raise ValueError("--hydra-help shows Hydra's own options and takes no overrides (--help takes them)")
    modes = [a for a in argv if a.split("=", 1)[0] in _MODES]
    if len({_MODES[m.split("=", 1)[0]] for m in modes}) > 1:
        raise ValueError(f"{' and '.join(modes)}: Hydra takes one of --run, --multirun (-m), --cfg and --info")
    overrides, i = [], 0
    while i < len(argv):
        arg = argv[i]
        name, attached, value = arg.partition("=")  # --cfg=job: attached
        # --cfg job: job is its value (not --cfg=job, nor --info before another flag or at the end)
        takes = (name in _VALUE_FLAGS and not attached and i + 1 < len(argv)
                 and not (name in ("--info", "-i") and argv[i + 1].startswith("-")))
        if not arg.startswith("-"):
            overrides.append(arg)
        elif name in _OTHER_CONFIG:
            raise ValueError(f"{name}: the harness composes its own conf/ (config.yaml and its groups); change it "
                             "with overrides, or add an option under conf/<group>/")
        elif name not in _FLAGS:
            raise ValueError(f"unknown option {arg!r} (Hydra's: -m, --cfg job|hydra|all, --info, --help, --hydra-help)")
        elif overrides and (name in ("-m", "--multirun") or any(not a.startswith("-") for a in argv[i + 1 + takes:])):
            flag = argv[i:i + 1 + takes]  # Hydra's argparse takes one run of overrides: else its usage text
            rest = " ".join(a for j, a in enumerate(argv) if not i <= j < i + len(flag))
            raise ValueError(f"{arg} goes before the overrides (python -m harness {' '.join(flag)} {rest})")
        elif name in _VALUE_FLAGS and (attached or takes or name not in ("--info", "-i")):
            choices = _VALUE_FLAGS[name]  # --info's value is optional (all), yet argparse would take an override
            given = value if attached else argv[i + 1] if i + 1 < len(argv) else None
            if given is None or choices is not None and given not in choices:
                raise ValueError(f"{name} takes {'one of ' + ', '.join(choices) if choices else 'a value'}")
            if given == "hydra" and "--resolve" in argv:  # Hydra resolves its node alone: ${results_dir} fails
                raise ValueError(f"{name} hydra --resolve: the run dirs name results_dir, outside the hydra node; "
                                 "use --cfg all --resolve, or --cfg hydra without --resolve")
        i += 1 + takes
    return overrides


def check_options(parsed: list) -> None:
    """Raises ValueError: an override Hydra would take and then fail on (a list for a group, an empty or unwritable
    ``hydra.run.dir`` / ``hydra.sweep.dir``, a string for ``hydra.launcher`` / ``hydra.sweeper``), or worse."""
    for o in parsed:
        key, value = o.key_or_group, o.value()
        if not key:
            raise ValueError(f"{o.input_line!r}: an override is key=value; the key before '=' is missing")
        if key in GROUPS and isinstance(value, list):
            raise ValueError(f"{key} takes one option; to run several, sweep them: -m {key}="
                             f"{','.join(map(str, value))}")
        if key in GROUPS and not (isinstance(value, str) or o.is_sweep_override() or o.is_delete()):
            raise ValueError(f"{key} takes the name of one option, got {o.input_line.split('=', 1)[1]!r} "
                             f"(available: {', '.join(group_options(key))})")
        if key in ("hydra.launcher", "hydra.sweeper"):
            raise ValueError(f"{key}={value}: Hydra's {key[6:]} is chosen with hydra/{key[6:]}=<name> "
                             "(installed: basic)")
        if key not in ("hydra.run.dir", "hydra.sweep.dir") or "${" in str(value):
            continue
        if value in ("", None):
            raise ValueError(f"{key} is empty: give a directory (or leave it out: Hydra's default)")
        if reason := cannot_write(str(value)):  # Hydra creates it when the job starts; a refused command leaves none
            raise ValueError(f"{key}={value}: cannot create the directory: {reason}")


def _first_line(e: Exception) -> str:
    """The first line of ``e``'s message that is not blank, stripped ("" for none)."""
    return next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")


def parse(arg: str):
    """``arg`` as Hydra parses it (an ``Override``). Raises ValueError (Hydra's first line): it does not parse."""
    try:
        return OverridesParser.create().parse_overrides([arg])[0]
    except HydraException as e:
        lines = [ln for ln in str(e).strip().splitlines() if not ln.startswith(("Error parsing", "See https"))]
        first = re.sub(r" expecting \{.*\}", "", lines[0]) if lines else type(e).__name__  # not the token list
        raise ValueError(f"cannot parse {arg!r}: {first}{_quote_hint(arg, lines)} (the grammar: "
                         f"https://hydra.cc/docs/1.2/advanced/override_grammar/basic)") from None


def _quote_hint(arg: str, lines: list[str]) -> str:
    """For a character of a value that Hydra's lexer takes only quoted (non-ASCII, ``&;#!``): how to quote it."""
    lead = "LexerNoViableAltException: "
    if len(lines) < 2 or not lines[0].startswith(lead) or lines[1].strip() != "^":
        return ""
    at, (key, _, value) = lines[1].index("^") - len(lead), arg.partition("=")
    if not len(key) < at < len(arg):  # in the key: no quotes help
        return ""
    plain = not set(value) & set("'\"[]{}(),")  # else a list, a sweep or a quote of its own: quote the item
    return f"; {arg[at]!r} needs quotes: " + (f"\"{key}='{value}'\" in a shell" if plain else "quote the item with it")


@contextlib.contextmanager
def hydra_compose():
    """Hydra's compose API over ``conf/``: yields ``compose(overrides) -> DictConfig``."""
    GlobalHydra.instance().clear()  # initialize_config_dir puts this cleared state back on exit
    with hydra.initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        yield lambda overrides: hydra.compose("config", overrides=list(overrides))


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
            raise ValueError(f"{o.input_line} selects nothing; options of {o.key_or_group}: "
                             f"{', '.join(group_options(o.key_or_group)) or 'none (not a config group)'}")
    bare = {f"~{o.key_or_group}=null": f"~{o.key_or_group}" for o in parsed if o.is_delete() and o.value() is None}
    return [[bare.get(a, a) for a in job] for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def for_hydra(argv: list[str], compose) -> list[str]:
    """``argv`` with ``++`` on a ``<group>.<key>=v`` whose key the group's default lacks: Hydra composes a sweep's
    default option first (``model=auto`` has no preset) and would stop with "Key ... is not in struct"."""
    keys = [a.split("=", 1)[0] for a in argv if "=" in a and a.split(".", 1)[0] in GROUPS and a[0] not in "+~-"]
    if not keys:  # each one dotted: <group>.<key>
        return argv
    base = compose([a for a in argv if a.split("=", 1)[0] in GROUPS and not parse(a).is_sweep_override()])
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
    return _first_line(e) or type(e).__name__


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
    if "not Optional" in text:
        return f"{key} cannot be null"
    kinds = [("Integer", "a list of integers" if raw.startswith("[") else "an integer"), ("Float", "a number"),
             ("bool", "true or false"), ("ListConfig", "a list"), ("str", "a string")]
    kind = next((k for word, k in kinds if word in text), "of the schema's type (harness/conf_schema.py)")
    return f"{key} must be {kind}, got {raw!r}"


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
    try:
        problem = check_job(cfg, job, compose)
        if not problem:
            notes += job_notes(cfg, job)
        return problem
    except Exception as e:  # an interpolation that does not resolve (${oc.env:...}), ...
        where = f" (in {e.full_key})" if getattr(e, "full_key", None) else ""
        return f"{type(e).__name__}: {_first_line(e)}{where}"


def check_command(argv: list[str]) -> tuple[str | None, list[str]]:
    """(the first problem of the command as one line, or None; ``argv`` as Hydra must get it). From here until the
    first job starts, a stop signal ends the process at once, in one line (``signals.AT_ONCE``): nothing has started."""
    AT_ONCE.set()
    try:
        overrides = overrides_of(argv)
        deleted = [a for a in argv if a.startswith("~llm.") and a[5:].split("=", 1)[0] in LLM_DEFAULTS]
        notes = [f"note: llm.{k} was deleted (~): the engine's default, {LLM_DEFAULTS[k]!r}, applies"
                 for k in (a[5:].split("=", 1)[0] for a in deleted)]
        argv = [a for a in argv if a not in deleted]
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
            return f"{_first_line(e)} (the basic sweeper takes a,b,c, choice(), range() and glob())", argv
        global JOB_COUNT
        JOB_COUNT = len(jobs)
        for job in jobs:
            job = [f"++{a}" if a.startswith("model.preset.") and _choice(job, "model", compose) == "auto" else a
                   for a in job]  # model=auto has no preset: job_setup puts these onto its pick
            if problem := _check_job(job, compose, notes):
                return problem, argv
        if multirun and (note := reuse_note(argv, jobs, compose)):
            notes.append(note)
        notes += given_twice(overrides) if multirun else []  # a sweep's jobs hold the last value alone
        for note in dict.fromkeys(notes):
            print(note, file=sys.stderr)
        argv = for_hydra(argv, compose)
    return None, argv  # AT_ONCE stays set through Hydra's composition: the first job clears it
