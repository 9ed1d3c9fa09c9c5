"""What a control plane costs: its decode step and TPOT beside ``control=ideal``'s (the same engine with no
transport), per configuration of the same sweep.

exposed = median over repeats of the plane's metric - median of ideal's, in us and in % of ideal's. The
spread is the range of differences the repeats allow, [plane min - ideal max, plane max - ideal min]; a
difference whose range contains 0 is "within noise" (the repeats cannot tell the plane from no transport).
One-way latency alone is not the cost: async scheduling hides most of it, and what is exposed can also be
more than it (a plane that holds rank 0's CPU or GIL delays everything after the send).

Beside it, ``send_late_us``: the plane's median over repeats of its send p50 plus the late mean of its
workers' launches (``ctrl_launch_late_us_mean``, CUDA): rank 0's time in the send, and how long rank 0's GPU
waits for a worker that queued its step after rank 0 did. On nvidia-h200-x2 at async off this sum tracked
the exposed TPOT of every plane (``results/h200x2/CONTROL.md``, session 5); an exposed cost well above it
lies somewhere else.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

EXPOSED_METRICS = [("decode_step_ms_p50", "decode step p50"), ("tpot_ms_p50", "TPOT p50")]


def send_late_us(plane: pd.DataFrame) -> float:
    """Median over the plane's repeats of send p50 + launch late mean (us); NaN where either is missing."""
    if not {"ctrl_send_us_p50", "ctrl_launch_late_us_mean"} <= set(plane.columns):
        return float("nan")
    total = pd.to_numeric(plane.ctrl_send_us_p50, errors="coerce") + pd.to_numeric(
        plane.ctrl_launch_late_us_mean, errors="coerce")
    return float(total.median()) if total.notna().any() else float("nan")


def exposed_cost(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per (configuration, plane other than ideal, metric) where the configuration has ideal rows:
    the grouping ``keys`` but control, ``metric``, ``ideal_ms``, ``plane_ms`` (medians), ``exposed_us``,
    ``exposed_pct`` (of ideal's), ``low_us`` / ``high_us`` (the spread), ``repeats`` (plane, ideal),
    ``verdict`` and ``send_late_us`` (:func:`send_late_us`). Empty when there is no ideal row. ``df``: ok
    rows only, key cells filled."""
    others = [k for k in keys if k != "control"]
    out = []
    if "ideal" not in set(df.control):
        return pd.DataFrame()
    df = _options_to_plane(df)
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
                            "repeats": f"{len(p)}/{len(i)}", "verdict": verdict,
                            "send_late_us": send_late_us(plane)})
    return pd.DataFrame(out)


def key_cell(value):
    """A configuration cell as a table shows it: a float as 4, 0.5 or inf (not 4.0), anything else as is."""
    return f"{value:g}" if isinstance(value, (float, np.floating)) else value


def _options_to_plane(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with each row's ``control.options.*`` settings moved from ``overrides`` into its ``control``
    label (``ring control.options.spin_us=0``): a plane's options name a variant of the plane, not another
    configuration, so ideal's rows (``control.options.inner=hybrid`` under torchrun) pair with every plane's.
    ``ideal`` keeps its plain name: its options only say how its recording travelled."""
    if "overrides" not in df.columns:
        return df
    items = [str(t).split() if isinstance(t, str) and t != "-" else [] for t in df.overrides]
    options = [" ".join(i for i in row if i.startswith("control.options.")) for row in items]
    df = df.copy()
    df["overrides"] = [" ".join(i for i in row if not i.startswith("control.options.")) or "-" for row in items]
    df["control"] = [c if c == "ideal" or not o else f"{c} {o}" for c, o in zip(df.control, options)]
    return df


def print_exposed(table: pd.DataFrame) -> None:
    """The exposed-cost table as markdown (nothing when it is empty)."""
    if table.empty:
        return
    shown = table.copy()
    for col in shown.columns[:list(shown.columns).index("control")]:  # the configuration: 4, inf (not 4.0)
        shown[col] = shown[col].map(key_cell)
    for col, spec in (("ideal_ms", ".3f"), ("plane_ms", ".3f"), ("exposed_us", "+.1f"), ("exposed_pct", "+.2f")):
        shown[col] = shown[col].map(lambda v, s=spec: format(v, s))
    shown["spread_us"] = [f"[{lo:+.1f}, {hi:+.1f}]" for lo, hi in zip(table.low_us, table.high_us)]
    shown["send_late_us"] = table.send_late_us.map(lambda v: "" if v != v else f"{v:.0f}")
    shown = shown.drop(columns=["low_us", "high_us"])
    print("\nexposed cost: the plane's median minus control=ideal's (same engine, no transport), us and % of "
          "ideal's; spread = [plane min - ideal max, plane max - ideal min] over repeats; send_late_us = the "
          "plane's send p50 + its workers' launch late mean, what rank 0 spends sending and waits for a worker "
          "that launched after it (on CPU the late mean is only the gap after the last collective)")
    print(shown.replace({np.nan: ""}).to_markdown(index=False, disable_numparse=True))  # keep the signs
