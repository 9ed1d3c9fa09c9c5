"""Checks of command-line overrides before Hydra sees them, so that common mistakes get one plain line
instead of Hydra's multi-line report (and fail before any work is done)."""

from __future__ import annotations

import os

from omegaconf import OmegaConf

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


def group_options(group: str) -> list[str]:
    """The choices of config group ``group`` (``control``, ``model``, ``workload``): its yaml files' names."""
    return sorted(f[:-5] for f in os.listdir(os.path.join(CONF_DIR, group)) if f.endswith(".yaml"))


def _int_at_least(minimum: int):
    def check(key: str, v: str) -> str | None:
        if not v.lstrip("-").isdigit() or int(v) < minimum:
            return f"{key} must be an integer >= {minimum}, got {v!r}"
        return None
    return check


def _choice(*allowed: str):
    def check(key: str, v: str) -> str | None:
        return None if v in allowed else f"{key} must be one of {', '.join(allowed)}, got {v!r}"
    return check


def _not_empty(hint: str):
    def check(key: str, v: str) -> str | None:
        return None if v else f"{key} is empty: {hint}"
    return check


VALUE_CHECKS = {"tp": _int_at_least(1), "repeat": _int_at_least(1), "seed": _int_at_least(0),
                "device": _choice("auto", "cpu", "cuda"), "engine": _choice("tp", "hf"),
                "model.path": _not_empty("give a checkpoint directory, or leave it out for the preset's weights"),
                "results_dir": _not_empty("give a directory (default: results)"),
                "results_file": _not_empty("give a file name (default: runs.csv)")}


def _check_workload_value(key: str, v: str, workloads: list[str]) -> str | None:
    """``workload.<k>=v`` applied to each selected workload and checked as the run would check it, so that
    a sweep's bad value fails before its first job rather than when its job comes up."""
    from hydra.errors import HydraException

    from .workloads import check_workload

    try:
        typed = _typed(key, v)
    except HydraException:
        return None  # Hydra reports its own grammar errors
    sub = key.split(".", 1)[1]
    for name in workloads:
        w = OmegaConf.to_container(_load_option("workload", name))
        if sub not in w:
            continue
        w[sub] = typed
        try:
            check_workload(w)
        except ValueError as e:
            return str(e)
    return None


def _typed(key: str, v: str):
    """``v`` as Hydra will type it (int, float, bool, str, ...); raises HydraException on a grammar error."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides([f"{key}={v}"])[0].value()


def _check_llm_value(key: str, v: str, devices: list[str]) -> str | None:
    """``llm.<setting>=v`` checked as the engine checks it without a checkpoint (``EngineConfig.check_settings``:
    type, range, the kernel choices and what needs CUDA) on every selected device, so that a sweep's bad
    value fails before its first job rather than when its job comes up."""
    from hydra.errors import HydraException

    from engine import ConfigError, EngineConfig

    try:
        typed = _typed(key, v)
    except HydraException:
        return None  # Hydra reports its own grammar errors
    for device in devices:
        try:
            EngineConfig.check_settings(**{key.split(".", 1)[1]: typed, "device": device})
        except TypeError:
            return None  # not an engine setting (the key check has passed): the harness handles it
        except ConfigError as e:  # the engine names the setting as its keyword; the command line says llm.<name>
            msg, name = str(e), key.split(".", 1)[1]
            return f"llm.{msg}" if msg.startswith((f"{name} ", f"{name}=")) else f"{key}: {msg}"
    return None


def _selected(argv: list[str], group: str, default: str) -> list[str]:
    """The options of ``group`` the command selects: its last ``group=...`` (as Hydra takes), else ``default``."""
    for arg in reversed(argv):
        key, sep, value = arg.partition("=")
        if sep and key == group:
            return [v.strip() for v in value.split(",")]
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


def check_overrides(argv: list[str]) -> str | None:
    """One-line message for the first bad override, or None: an unknown group option or key (``+key`` adds
    only keys some option of the group knows, or a Qwen3Config field under ``model.preset``), a
    ``control.options`` key the selected plane does not take, a bad value of tp, repeat, seed, device,
    engine, a ``workload.*`` or ``llm.*`` key (every value of a sweep), an empty path, a sweep value without
    ``-m``, a ``+key`` for a key that exists (Hydra's ``+`` adds; setting needs no prefix)."""
    sweep = "-m" in argv or "--multirun" in argv
    controls = _selected(argv, "control", "shm")  # config.yaml's defaults
    workloads = _selected(argv, "workload", "bench")
    devices = _selected(argv, "device", "auto")
    for arg in argv:
        if arg.startswith("-"):
            continue
        key, sep, value = arg.partition("=")
        if not sep:
            continue
        plain = key.lstrip("+~")
        if key.startswith("+") and not key.startswith("++") and _exists(plain, controls, workloads):
            return f"{plain} exists already: set it without the + ({plain}={value})"
        if key.startswith(("+", "~")):
            if plain.startswith(("hydra.", "model.preset.")) or _key_known(plain, controls):
                continue
            return f"unknown config key {plain!r}: the harness would ignore it (see conf/)"
        listed = value.strip().startswith(("[", "{", "'", '"'))  # one value that holds commas, not a sweep
        if "," in value and not sweep and not listed:
            return f"{arg} is a sweep: add -m (python -m harness -m {arg} ...)"
        values = [value.strip()] if listed else [v.strip() for v in value.split(",")]
        if key in GROUPS:
            known = group_options(key)
            bad = [v for v in values if v not in known]
            if bad:
                return f"unknown {key} {bad[0]!r}; available: {', '.join(known)}"
            continue
        if key.startswith("control.options.") and not _key_known(key, controls):
            lacking = [c for c in controls if not _key_known(key, [c])]
            return (f"control={lacking[0]} has no option {key.split('.', 2)[2]!r} "
                    f"(its options: {', '.join(_options_of(lacking[0])) or 'none'})")
        if not _key_known(key, controls):
            return f"unknown config key {key!r} (see conf/; prefix it with + to add a new key)"
        if key.startswith("workload."):  # Hydra refuses a key the selected workload lacks, in 7 lines
            lacking = [w for w in workloads if not _in_option("workload", w, key.split(".", 1)[1])]
            if lacking:
                return (f"workload={lacking[0]} has no key {key.split('.', 1)[1]!r} (pick a workload that has "
                        f"it, e.g. workload=latency, or add it with ++{key}=...)")
        for v in values:
            if "(" in v:  # Hydra's sweep functions (range, choice, interval...): Hydra expands and checks them
                continue
            problem = (VALUE_CHECKS[key](key, v) if key in VALUE_CHECKS
                       else _check_workload_value(key, v, workloads) if key.startswith("workload.")
                       else _check_llm_value(key, v, devices) if key.startswith("llm.") else None)
            if problem:
                return problem
    return None


def _exists(key: str, controls: list[str], workloads: list[str]) -> bool:
    """Whether ``key`` is already in the composed configuration: config.yaml, or every selected option of its
    group (where Hydra's ``+key=`` fails with "Could not append to config")."""
    head, _, rest = key.partition(".")
    if head in GROUPS:
        selected = {"control": controls, "workload": workloads}.get(head)
        return bool(rest and selected) and all(_in_option(head, o, rest) for o in selected)
    base = OmegaConf.load(os.path.join(CONF_DIR, "config.yaml"))
    return OmegaConf.select(base, key, default=_MISSING) is not _MISSING


def _options_of(control: str) -> list[str]:
    options = OmegaConf.load(os.path.join(CONF_DIR, "control", f"{control}.yaml")).get("options") or {}
    return sorted(options)
