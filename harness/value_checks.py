"""Checks of top-level settings that their types (``conf_schema.HarnessConfig``) do not express, each
``check(key, value) -> message | None``."""

from __future__ import annotations

from common import is_int, is_number
from engine import ConfigError
from engine.config import MAX_SEED
from engine.profiling import parse_window, profile_problem  # the engine's rules, written once


def _int_at_least(minimum: int, maximum: int | None = None, spelled: str = ""):
    def check(key: str, v) -> str | None:
        if not is_int(v) or v < minimum or (maximum is not None and v > maximum):
            bound = f"in [{minimum}, {spelled or maximum}]" if maximum is not None else f">= {minimum}"
            return f"{key} must be an integer {bound}, got {'' if v is None else str(v)!r}"
        return None
    return check


def _choice(*allowed: str):
    def check(key: str, v) -> str | None:
        v = "" if v is None else str(v)
        return None if v in allowed else f"{key} must be one of {', '.join(allowed)}, got {v!r}"
    return check


def _not_empty(hint: str):
    def check(key: str, v) -> str | None:  # null is the default of model.path; results_dir's type refuses it
        return None if v != "" else f"{key} is empty: {hint}"
    return check


def _positive_number(key: str, v) -> str | None:
    if not is_number(v) or not v > 0:
        return f"{key} must be a number > 0, got {'' if v is None else str(v)!r}"
    return None


def _file_name(key: str, v) -> str | None:
    """A plain file name: the rows go inside ``results_dir``, never elsewhere through a path."""
    if v in (None, ""):
        return f"{key} is empty: give a file name (default: runs.csv)"
    if "/" in str(v) or str(v) in (".", ".."):
        return f"{key} must be a file name inside results_dir, got {str(v)!r} (set results_dir for the directory)"
    return None


def _profile_steps(key: str, v) -> str | None:
    try:
        parse_window(v)
    except ConfigError as e:
        return str(e)
    return None


VALUE_CHECKS = {"tp": _int_at_least(1), "repeat": _int_at_least(1), "seed": _int_at_least(0, MAX_SEED, "2^63 - 1"),
                "device": _choice("auto", "cpu", "cuda"), "engine": _choice("tp", "hf"),
                "model.path": _not_empty("give a checkpoint directory, or leave it out for the preset's weights"),
                "results_dir": _not_empty("give a directory (default: results)"), "results_file": _file_name,
                "hf_batch_size": _int_at_least(1), "nvml_interval_s": _positive_number,
                "profile": lambda key, v: profile_problem(v), "profile_steps": _profile_steps}
