"""The configuration columns ``harness.analyze`` keys rows by, and which of them it groups or matches on."""

from __future__ import annotations

import pandas as pd

from .load_results import InputError
from .schema import ADDED_IN

# the serve keys before overrides, so that the rows of a rate sweep sort by rate (4, 16, inf), not as text
CONFIG_KEYS = ["engine", "control", "tp", "launcher", "nodes", "model", "model_hash", "device", "dtype", "cpu_threads",
               "all_reduce", "gemm", "workload", "request_rate", "burstiness", "max_concurrency", "slo", "overrides",
               "payload", "seed", "tag"]


def group_keys(df: pd.DataFrame, group: list[str] | None) -> list[str]:
    """The columns that identify a configuration: ``group`` when given, else tp, control and every other
    configuration column that differs between rows. Raises InputError: not a configuration column, or twice."""
    if group:
        if bad := [g for g in group if g not in CONFIG_KEYS or g not in df.columns]:
            raise InputError(f"unknown --group column(s): {', '.join(bad)}; configuration columns: "
                             f"{', '.join(k for k in CONFIG_KEYS if k in df.columns)}")
        if twice := sorted({g for g in group if group.count(g) > 1}):
            raise InputError(f"--group: {', '.join(twice)} given twice")
        return group
    return ["tp", "control"] + [k for k in CONFIG_KEYS if k not in ("tp", "control")
                                and df[k].nunique(dropna=False) > 1]


def pooled_keys(df: pd.DataFrame, group: list[str] | None) -> list[str]:
    """The configuration columns that differ among ``df``'s rows but are not in ``group`` (none without it)."""
    return [k for k in CONFIG_KEYS if group and k not in group and k in df and df[k].nunique(dropna=False) > 1]


def comparable_keys(old: pd.DataFrame, new: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(the configuration keys ``--compare`` matches rows on, the keys it leaves out; never ``tag``). A key one
    file's schema predates (``schema.ADDED_IN``) is left out where the other holds one value in it on every row."""
    keys, dropped = [], []
    for k in CONFIG_KEYS:
        in_old, in_new = old[k].notna().any(), new[k].notna().any()
        if k == "tag" or not (in_old or in_new):  # tag labels the runs on each side (tag=baseline, tag=pr-123)
            continue
        filled, lacking = (old, new) if in_old else (new, old)
        predates = pd.to_numeric(lacking["schema_version"], errors="coerce").max() < ADDED_IN.get(k, 0)
        one_sided = in_old != in_new and predates and filled[k].nunique(dropna=False) == 1
        (dropped if one_sided else keys).append(k)
    return keys, dropped


def fill_keys(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Empty key cells become "-" (a group of their own that indexes like any other)."""
    return df.assign(**{k: df[k].astype(object).where(df[k].notna(), "-") for k in keys if df[k].isna().any()})
