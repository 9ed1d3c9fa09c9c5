"""Checks of command-line overrides before Hydra sees them, so that common mistakes get one plain line
instead of Hydra's multi-line report (and fail before any work is done)."""

from __future__ import annotations

import itertools
import os
import re

from omegaconf import OmegaConf

from .model_checks import check_gpu_count, check_models
from .value_checks import VALUE_CHECKS


def _conf_dir() -> str:
    """``conf/`` of this source tree (a checkout, an editable install), else the installed copy, the package
    ``tpcp_conf``."""
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")
    if os.path.isfile(os.path.join(here, "config.yaml")):
        return here
    import importlib.util

    spec = importlib.util.find_spec("tpcp_conf")
    return os.path.dirname(spec.origin) if spec and spec.origin else here


CONF_DIR = _conf_dir()
GROUPS = ("control", "model", "workload")
_MISSING = object()


def default_option(group: str) -> str:
    """The option of ``group`` that conf/config.yaml's ``defaults`` list selects (``control`` -> ``shm``)."""
    for entry in OmegaConf.load(os.path.join(CONF_DIR, "config.yaml")).defaults:
        if isinstance(entry, str):
            continue
        if group in entry:
            return str(entry[group])
    raise KeyError(group)


def group_options(group: str) -> list[str]:
    """The choices of config group ``group`` (``control``, ``model``, ``workload``): its yaml files' names."""
    return sorted(f[:-5] for f in os.listdir(os.path.join(CONF_DIR, group)) if f.endswith(".yaml"))


def _check_workload_value(key: str, typed, workloads: list[str], given: dict) -> str | None:
    """``workload.<k>`` = ``typed`` applied to each selected workload and checked as the run would check it,
    so that a sweep's bad value fails before its first job rather than when its job comes up. A workload
    that lacks the key (``++`` adds it; its kind ignores it, as bench does ``iterations``) is checked as
    the first workload that has the key would be: a bad value is refused wherever it is added. ``given``:
    the command's other ``workload.*`` values (the first of a sweep's), applied too where the workload has
    the key, so that a pair set together (``min_input_len`` above the default ``max_input_len``, with a
    larger ``max_input_len``) is checked as the pair."""
    from .workloads import check_workload

    sub = key.split(".", 1)[1]  # may be dotted: slo.ttft_ms
    for name in workloads:
        w = _load_option("workload", name)
        if not _in_option("workload", name, sub):
            donors = [o for o in group_options("workload") if _in_option("workload", o, sub)]
            if not donors:
                continue
            w = _load_option("workload", donors[0])
        for k, v in given.items():
            if OmegaConf.select(w, k, default=_MISSING) is not _MISSING:
                OmegaConf.update(w, k, v)
        OmegaConf.update(w, sub, typed)
        try:
            check_workload(OmegaConf.to_container(w))
        except ValueError as e:
            return str(e)
    return None


class GrammarError(ValueError):
    """An override Hydra's grammar does not parse; the message is Hydra's first line."""


def parse(arg: str):
    """``arg`` as Hydra parses it (a ``hydra.core.override_parser.types.Override``).

    Raises:
        GrammarError: Hydra's grammar does not parse it (Hydra itself would print four lines and exit 1).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        return OverridesParser.create().parse_overrides([arg])[0]
    except HydraException as e:
        lines = [ln for ln in str(e).strip().splitlines() if not ln.startswith(("Error parsing", "See https"))]
        first = re.sub(r" expecting \{.*\}", "", lines[0]) if lines else type(e).__name__  # not the token list
        raise GrammarError(f"cannot parse {arg!r}: {first} (the grammar: https://hydra.cc/docs/1.2/advanced/"
                           f"override_grammar/basic)") from None


def typed_values(override) -> list | None:
    """The values an override gives its key, typed as Hydra types them (int, float, bool, str, list, ...):
    one, or each of a sweep (``a,b``, ``choice(...)``, ``range(...)``); None where Hydra cannot list them
    (``interval(...)``, a glob)."""
    from hydra.core.override_parser.types import QuotedString
    from hydra.errors import HydraException

    if not override.is_sweep_override():
        return [override.value()]
    try:
        return [v.text if isinstance(v, QuotedString) else v for v in override.sweep_iterator()]
    except HydraException:
        return None


def cli_message(message: str, llm_keys) -> str:
    """An engine ``ConfigError`` that names a setting by its keyword (``gemm=cublas needs ...``) renamed as
    the command line spells it (``llm.gemm=cublas needs ...``) when it is one of ``llm_keys``."""
    name = message.split(" ", 1)[0].split("=", 1)[0]
    return f"llm.{message}" if name in llm_keys else message


def _check_llm_value(key: str, typed, devices: list[str]) -> str | None:
    """``llm.<setting>`` = ``typed`` checked as the engine checks it without a checkpoint
    (``EngineConfig.check_settings``: type, range, the kernel choices and what needs CUDA) on every selected
    device, so that a sweep's bad value fails before its first job rather than when its job comes up."""
    from engine import ConfigError, EngineConfig

    name = key.split(".", 1)[1]
    for device in devices:
        try:
            EngineConfig.check_settings(**{name: typed, "device": device})
        except TypeError:
            return None  # not an engine setting (the key check has passed): the harness handles it
        except ConfigError as e:
            return cli_message(str(e), {name})
    return None


def _selected(argv: list[str], group: str, default: str) -> list[str]:
    """The values of ``group`` (or top-level key) the command selects: its last ``group=...`` (as Hydra
    takes), each value of a sweep, as text; else ``default``."""
    for arg in reversed(argv):
        key, sep, _ = arg.partition("=")
        if sep and key == group:
            override = parse(arg)
            values = typed_values(override) if override is not None else None
            return [str(v) for v in values] if values else [default]
    return [default]


def _load_option(group: str, option: str):
    """``conf/<group>/<option>.yaml`` as Hydra composes it: its ``defaults`` (other options of the same group,
    and ``_self_``) merged in order (latency-b8 is latency plus its own keys)."""
    conf = OmegaConf.load(os.path.join(CONF_DIR, group, f"{option}.yaml"))
    defaults = conf.pop("defaults", None)
    if not defaults:
        return conf
    parts = [conf if d == "_self_" else _load_option(group, d) for d in defaults]
    return OmegaConf.merge(*parts, *([] if "_self_" in defaults else [conf]))


def _in_option(group: str, option: str, key: str) -> bool:
    """Whether option ``option`` of ``group`` has ``key`` (dotted)."""
    return OmegaConf.select(_load_option(group, option), key, default=_MISSING) is not _MISSING


def _key_known(key: str, controls: list[str]) -> bool:
    """Whether ``key`` exists in the configuration: in config.yaml, or in some option of its group; a
    ``control.options.*`` key in every control plane the command selects (``controls``)."""
    head, _, rest = key.partition(".")
    if head == "hydra":
        return True
    if head in GROUPS:
        if not rest:
            return True
        options = controls if head == "control" and rest.startswith("options.") else group_options(head)
        found = [_in_option(head, o, rest) for o in options]
        return all(found) if head == "control" and rest.startswith("options.") else any(found)
    base = OmegaConf.load(os.path.join(CONF_DIR, "config.yaml"))
    return OmegaConf.select(base, key, default=_MISSING) is not _MISSING


def _given(argv: list[str], prefix: str) -> dict[str, list]:
    """The command's settings under ``prefix`` (``workload.``, ``control.options.``): {the key after the
    prefix: its values, typed as Hydra types them (several for a sweep)}."""
    given = {}
    for arg in argv:
        key, sep, _ = arg.partition("=")
        key = key.lstrip("+")
        override = parse(arg) if sep and key.startswith(prefix) else None
        values = typed_values(override) if override is not None else None
        if values:
            given[key[len(prefix):]] = values
    return given


def check_overrides(argv: list[str]) -> str | None:
    """One-line message for the first bad override, or None: an unknown group option or key (``+key`` adds
    only keys some option of the group knows, or a Qwen3Config field under ``model.preset``), a
    ``control.options`` key the selected plane does not take, a bad value of tp, repeat, seed, device,
    engine, a ``workload.*`` or ``llm.*`` key (every value of a sweep), an empty path, a sweep value without
    ``-m``, a ``+key`` for a key that exists (Hydra's ``+`` adds; setting needs no prefix)."""
    for arg in argv:  # grammar first: every later step parses
        try:
            parse(arg) if "=" in arg and not arg.startswith("-") else None
        except GrammarError as e:
            return str(e)
    sweep = "-m" in argv or "--multirun" in argv
    flag = next((i for i, a in enumerate(argv) if a in ("-m", "--multirun")), None)
    if flag is not None and any(not a.startswith("-") for a in argv[:flag]):  # Hydra's argparse: 8 lines
        rest = " ".join(a for a in argv if a != argv[flag])
        return f"{argv[flag]} goes before the overrides (python -m harness -m {rest})"
    controls, models, workloads = (_selected(argv, g, default_option(g)) for g in GROUPS)
    selected = {"control": controls, "workload": workloads, "model": models}
    devices = _selected(argv, "device", "auto")
    # the llm.* settings matter only to jobs that build the engine (not engine=hf, not workload=broadcast)
    builds_engine = "tp" in _selected(argv, "engine", "tp") and any(w != "broadcast" for w in workloads)
    workload_given = {k: v[0] for k, v in _given(argv, "workload.").items()}
    for arg in argv:
        if arg.startswith("-"):
            continue
        key, sep, value = arg.partition("=")
        plain = key.lstrip("+~")
        if key.startswith("~") and plain not in GROUPS and _exists(plain, selected, every=True) is None:
            return f"~{plain}: no such key to delete (not in config.yaml or in every selected option of its group)"
        if not sep:
            continue
        if key.startswith("+") and not key.startswith("++"):
            where = _exists(plain, selected)
            if where is not None:
                return (f"{plain} exists already{where}: set it without the + ({plain}={value}), or with ++ "
                        f"where some of the selected options lack it")
        if key.startswith(("+", "~")):
            if not (plain.startswith(("hydra.", "model.preset.")) or _key_known(plain, controls)):
                return f"unknown config key {plain!r}{_suggest(plain)}: the harness would ignore it (see conf/)"
            if not key.startswith("++"):
                continue
        forced, key = key.startswith("++"), plain  # ++ adds the key where missing; its values are checked below
        override = parse(arg)
        values = typed_values(override) if override is not None else None
        if override is not None and override.is_sweep_override() and not sweep:
            return f"{arg} is a sweep: add -m (python -m harness -m {arg} ...)"
        if key in GROUPS:
            known = group_options(key)
            bad = [v for v in values or [] if str(v) not in known]
            if bad:
                return f"unknown {key} {str(bad[0])!r}; available: {', '.join(known)}"
            continue
        if key.startswith("control.options.") and not _key_known(key, controls):
            lacking = [c for c in controls if not _key_known(key, [c])]
            return (f"control={lacking[0]} has no option {key.split('.', 2)[2]!r} "
                    f"(its options: {', '.join(_options_of(lacking[0])) or 'none'})")
        if not _key_known(key, controls):
            return f"unknown config key {key!r}{_suggest(key)} (the keys are in conf/; the harness reads no other)"
        if key.startswith("workload.") and not forced:  # Hydra refuses a key the workload lacks, in 7 lines
            lacking = [w for w in workloads if not _in_option("workload", w, key.split(".", 1)[1])]
            if lacking:
                having = [o for o in group_options("workload") if _in_option("workload", o, key.split(".", 1)[1])]
                return (f"workload={lacking[0]} has no key {key.split('.', 1)[1]!r} (pick a workload that has "
                        f"it, e.g. workload={having[0]}, or add it with ++{key}=...)")
        for v in values or []:  # None: a grammar error or an interval sweep, which Hydra reports or expands
            problem = (VALUE_CHECKS[key](key, v) if key in VALUE_CHECKS
                       else _check_workload_value(key, v, workloads, workload_given) if key.startswith("workload.")
                       else _check_llm_value(key, v, devices) if key.startswith("llm.") and builds_engine
                       else None)
            if problem:
                return problem
    tps = [int(t) for t in _selected(argv, "tp", "1") if t.isdigit()]
    if "broadcast" in workloads and "ideal" in controls:  # one job of the sweep would be refused after others ran
        return ("workload=broadcast with control=ideal: ideal has no transport to time alone (sweep the planes "
                "that send; ideal is the baseline of every other workload)")
    deleted = [a[len("~model.preset."):].split("=", 1)[0] for a in argv if a.startswith("~model.preset.")]
    paths = [p for p in _given(argv, "model.").get("path", []) if p not in (None, "")]
    problem = check_models(CONF_DIR, models, devices, tps if builds_engine else [], paths,
                           _given(argv, "model.preset."), deleted)
    return (problem or check_gpu_count(devices, tps if builds_engine else [])
            or _check_control_options(argv, controls))


def for_hydra(argv: list[str]) -> list[str]:
    """``argv`` as Hydra must get it: a plain ``<group>.<key>=v`` (no prefix) whose key the configuration
    Hydra composes first lacks gets ``++``. A sweep over a group composes the group's default option first
    (``-m control=ring,hybrid control.options.nslots=4``: shm has no nslots), and ``model=auto`` has no
    preset of its own (``model.preset.*`` goes onto the preset it picks); without the prefix Hydra stops
    with "Key ... is not in struct". Call after :func:`check_overrides`, which refuses a key that a job's
    option lacks, so the prefix only ever sets keys that each job has."""
    out = []
    for arg in argv:
        key, sep, _ = arg.partition("=")
        head, _, rest = key.partition(".")
        if sep and rest and head in GROUPS and not key.startswith(("+", "~")):
            chosen = _selected(argv, head, default_option(head))
            first = chosen[0] if len(chosen) == 1 else default_option(head)
            if not _in_option(head, first, rest):
                arg = "++" + arg
        out.append(arg)
    return out


def _check_control_options(argv: list[str], controls: list[str]) -> str | None:
    """Every selected plane's options (its conf/control file's, the command's ``control.options.*`` values
    applied, each combination of a sweep's) through the plane's own check (``check_options``), at the
    largest tp asked for; the message of the first it refuses, or None."""
    from backends import get_control_plane

    given = _given(argv, "control.options.")
    tps = [int(t) for t in _selected(argv, "tp", "1") if t.isdigit()] or [1]
    for control in controls:
        base = OmegaConf.to_container(_load_option("control", control)).get("options") or {}
        names = [k for k in given if k in base]
        for combo in itertools.product(*(given[k] for k in names)):
            try:
                get_control_plane(control).check_options(max(tps), **{**base, **dict(zip(names, combo))})
            except ValueError as e:
                return str(e)
    return None


def _exists(key: str, selected: dict[str, list[str]], every: bool = False) -> str | None:
    """Where ``key`` is already in the composed configuration ("" for config.yaml, " in workload=latency"
    for a selected option of its group; ``selected``: the options the command selects per group), which
    makes Hydra's ``+key=`` fail ("Could not append to config"); None where it is not. ``every``: only
    where every selected option of the group has it (what ``~key`` needs to delete it in every job)."""
    head, _, rest = key.partition(".")
    if head in GROUPS:
        options = selected.get(head) or []
        having = [o for o in options if rest and _in_option(head, o, rest)]
        if every and len(having) < len(options):
            return None
        return f" in {head}={having[0]}" if having else None
    base = OmegaConf.load(os.path.join(CONF_DIR, "config.yaml"))
    return "" if OmegaConf.select(base, key, default=_MISSING) is not _MISSING else None


def _keys_of(conf, prefix: str = "") -> list[str]:
    """Every dotted key of a loaded config (``llm.timeout_s``, ``slo.ttft_ms``...), hydra's own left out."""
    if not isinstance(conf, dict):
        conf = OmegaConf.to_container(conf, resolve=False)
    out = []
    for k, v in conf.items():
        if k not in ("hydra", "defaults"):
            out.append(prefix + str(k))
            out += _keys_of(v, f"{prefix}{k}.") if isinstance(v, dict) else []
    return out


def _suggest(key: str) -> str:
    """`` (did you mean 'x'?)`` for the known key nearest to a mistyped ``key``, else ""."""
    import difflib

    head, _, rest = key.partition(".")
    if head in GROUPS and rest:
        known = sorted({f"{head}.{k}" for o in group_options(head) for k in _keys_of(_load_option(head, o))})
    else:
        known = _keys_of(OmegaConf.load(os.path.join(CONF_DIR, "config.yaml"))) + list(GROUPS)
    close = difflib.get_close_matches(key, [k for k in known if k.count(".") == key.count(".")], n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _options_of(control: str) -> list[str]:
    options = OmegaConf.load(os.path.join(CONF_DIR, "control", f"{control}.yaml")).get("options") or {}
    return sorted(options)
