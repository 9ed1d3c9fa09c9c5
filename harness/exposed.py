"""What a control plane costs: its decode step and TPOT beside ``control=ideal``'s (the same engine with no
transport), per configuration of the same sweep.

exposed = median over repeats of the plane's metric - median of ideal's, in us and in % of ideal's. The
spread is the range of differences the repeats allow, [plane min - ideal max, plane max - ideal min]; a
difference whose range contains 0 is "within noise" (the repeats cannot tell the plane from no transport).
One-way latency alone is not the cost: async scheduling hides most of it, and what is exposed can also be
more than it (a plane that holds rank 0's CPU or GIL delays everything after the send).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

EXPOSED_METRICS = [("decode_step_ms_p50", "decode step p50"), ("tpot_ms_p50", "TPOT p50")]


def exposed_cost(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per (configuration, plane other than ideal, metric) where the configuration has ideal rows:
    the grouping ``keys`` but control, ``metric``, ``ideal_ms``, ``plane_ms`` (medians), ``exposed_us``,
    ``exposed_pct`` (of ideal's), ``low_us`` / ``high_us`` (the spread), ``repeats`` (plane, ideal) and
    ``verdict``. Empty when there is no ideal row. ``df``: ok rows only, key cells filled."""
    others = [k for k in keys if k != "control"]
    out = []
    if "ideal" not in set(df.control):
        return pd.DataFrame()
    groups = df.groupby(others, dropna=False) if others else [((), df)]
    for cfg, rows in groups:
        cfg = cfg if isinstance(cfg, tuple) else (cfg,)
        ideal = rows[rows.control == "ideal"]
        if ideal.empty:
            continue
        for control, plane in rows[rows.control != "ideal"].groupby("control"):
            for metric, label in EXPOSED_METRICS:
                i, p = ideal[metric].dropna(), plane[metric].dropna()
                if i.empty or p.empty:
                    continue
                diff_us = (p.median() - i.median()) * 1e3
                low, high = (p.min() - i.max()) * 1e3, (p.max() - i.min()) * 1e3
                verdict = "within noise" if low <= 0 <= high else ("costs" if diff_us > 0 else "faster")
                if min(len(p), len(i)) < 2:
                    verdict = "one repeat: no spread"
                out.append({**dict(zip(others, cfg)), "control": control, "metric": label,
                            "ideal_ms": i.median(), "plane_ms": p.median(), "exposed_us": diff_us,
                            "exposed_pct": 100 * diff_us / 1e3 / i.median(), "low_us": low, "high_us": high,
                            "repeats": f"{len(p)}/{len(i)}", "verdict": verdict})
    return pd.DataFrame(out)


def print_exposed(table: pd.DataFrame) -> None:
    """The exposed-cost table as markdown (nothing when it is empty)."""
    if table.empty:
        return
    shown = table.copy()
    for col, spec in (("ideal_ms", ".3f"), ("plane_ms", ".3f"), ("exposed_us", "+.1f"), ("exposed_pct", "+.2f")):
        shown[col] = shown[col].map(lambda v, s=spec: format(v, s))
    shown["spread_us"] = [f"[{lo:+.1f}, {hi:+.1f}]" for lo, hi in zip(table.low_us, table.high_us)]
    shown = shown.drop(columns=["low_us", "high_us"])
    print("\nexposed cost: the plane's median minus control=ideal's (same engine, no transport), us and % of "
          "ideal's; spread = [plane min - ideal max, plane max - ideal min] over repeats")
    print(shown.replace({np.nan: ""}).to_markdown(index=False))
