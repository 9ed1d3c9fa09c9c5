"""Checks of command-line overrides before Hydra sees them, so that common mistakes get one plain line
instead of Hydra's multi-line report (and fail before any work is done)."""

from __future__ import annotations

import os

from omegaconf import OmegaConf

CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")
GROUPS = ("control", "model", "workload")
_MISSING = object()


def group_options(group: str) -> list[str]:
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


VALUE_CHECKS = {"tp": _int_at_least(1), "repeat": _int_at_least(1), "seed": _int_at_least(0),
                "device": _choice("auto", "cpu", "cuda"), "engine": _choice("tp", "hf")}


def _key_known(key: str) -> bool:
    head, _, rest = key.partition(".")
    if head == "hydra":
        return True
    if head in GROUPS:
        if not rest:
            return True
        for option in group_options(head):
            cfg = OmegaConf.load(os.path.join(CONF_DIR, head, f"{option}.yaml"))
            if OmegaConf.select(cfg, rest, default=_MISSING) is not _MISSING:
                return True
        return False
    base = OmegaConf.load(os.path.join(CONF_DIR, "config.yaml"))
    return OmegaConf.select(base, key, default=_MISSING) is not _MISSING


def check_overrides(argv: list[str]) -> str | None:
    """One-line message for the first bad override (unknown group option or key, a bad value of tp,
    repeat, seed or device), or None. Sweep values (``a,b``) are each checked; ``+key=`` is left to Hydra."""
    sweep = "-m" in argv or "--multirun" in argv
    for arg in argv:
        if arg.startswith("-"):
            continue
        key, sep, value = arg.partition("=")
        if not sep or key.startswith(("+", "~")):
            continue
        if "," in value and not sweep and not value.strip().startswith(("[", "{", "'", '"')):
            return f"{arg} is a sweep: add -m (python -m harness -m {arg} ...)"
        values = [v.strip() for v in value.split(",")]
        if key in GROUPS:
            known = group_options(key)
            bad = [v for v in values if v not in known]
            if bad:
                return f"unknown {key} {bad[0]!r}; available: {', '.join(known)}"
            continue
        if not _key_known(key):
            return f"unknown config key {key!r} (see conf/; prefix it with + to add a new key)"
        if key in VALUE_CHECKS:
            for v in values:
                problem = VALUE_CHECKS[key](key, v)
                if problem:
                    return problem
    return None
