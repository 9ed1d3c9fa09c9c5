"""The analysis figure: one row of panels per configuration (workload, setting, tp, model...: every grouping
key but the control plane), one panel per metric, the control planes on the x-axis in one fixed colour each
across every panel, p50 bars (median over repeats) with p99 whiskers, the legend outside the data."""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd

PLANE_ORDER = ["ideal", "shm", "queue", "pipe", "gloo", "ring", "zmq", "hybrid"]
# (p50 column, p99 column or None, title)
PANELS = [("output_tok_s", None, "output tok/s"), ("tpot_ms_p50", "tpot_ms_p99", "TPOT (ms)"),
          ("decode_step_ms_p50", "decode_step_ms_p99", "decode step (ms)"),
          ("ctrl_oneway_us_p50", "ctrl_oneway_us_p99", "control one-way (us)")]


def plane_colours(planes: list[str]) -> dict[str, str]:
    """The same colour for a plane in every panel and every figure (tab10, in PLANE_ORDER)."""
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    known = {p: cmap(i % 10) for i, p in enumerate(PLANE_ORDER)}
    extra = [p for p in planes if p not in known]
    return {**known, **{p: cmap((len(PLANE_ORDER) + i) % 10) for i, p in enumerate(extra)}}


def plot(df: pd.DataFrame, keys: list[str], out: str) -> None:
    """Write the figure of the ok rows ``df`` (key cells filled) grouped by ``keys`` to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rest = [k for k in keys if k != "control"]
    groups = list(df.groupby(rest, dropna=False)) if rest else [((), df)]
    panels = [p for p in PANELS if df[p[0]].notna().any()]
    planes = sorted(df.control.unique(), key=lambda c: (PLANE_ORDER.index(c) if c in PLANE_ORDER else 99, c))
    colours = plane_colours(planes)
    fig, axes = plt.subplots(len(groups), len(panels), figsize=(3.6 * len(panels), 3.1 * len(groups) + 0.8),
                             squeeze=False, gridspec_kw={"hspace": 0.9})
    for row, (cfg, rows) in zip(axes, groups):
        cfg = cfg if isinstance(cfg, tuple) else (cfg,)
        label = " ".join(f"{k}={v}" for k, v in zip(rest, cfg) if v != "-")
        reps = rows.groupby("control").size()
        for ax, (p50, p99, title) in zip(row, panels):
            present = [c for c in planes if c in set(rows.control) and rows[rows.control == c][p50].notna().any()]
            med = [rows[rows.control == c][p50].median() for c in present]
            top = [rows[rows.control == c][p99].median() if p99 else np.nan for c in present]
            x = np.arange(len(present))
            ax.bar(x, med, color=[colours[c] for c in present], width=0.7)
            for xi, m, t in zip(x, med, top):
                if not np.isnan(t):
                    ax.plot([xi, xi], [m, t], color="black", linewidth=1)
                    ax.plot([xi - 0.15, xi + 0.15], [t, t], color="black", linewidth=1)
            ax.set_xticks(x, present, rotation=45, fontsize=7)
            ax.set_title(title + (" p50, whisker p99" if p99 else ""), fontsize=8)
            ax.grid(axis="y", alpha=0.3)
            ax.tick_params(axis="y", labelsize=7)
        n = f"{int(reps.min())}" if reps.min() == reps.max() else f"{int(reps.min())}-{int(reps.max())}"
        # Wrapped to the figure's width (~13 bold 8-pt characters an inch), growing upwards into the gap.
        text = textwrap.fill(f"{label}  ({n} repeats)", width=int(fig.get_size_inches()[0] * 13))
        note = row[0].annotate(text, xy=(0, 1.2), xycoords="axes fraction", fontsize=8, va="bottom",
                               fontweight="bold", annotation_clip=False)
        note.set_in_layout(False)  # a long label must not squeeze the panels
    same = ", ".join(f"{k}={df[k].iloc[0]}" for k in ("model", "device", "dtype") if k in df and df[k].nunique() == 1)
    fig.text(0.01, 0.995, same, fontsize=8, va="top")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[c]) for c in planes]
    fig.legend(handles, planes, loc="upper center", ncol=len(planes), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 1.0))
    height = fig.get_size_inches()[1]
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.9 / height, top=1 - 1.0 / height, wspace=0.3)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"plot written to {out}")
