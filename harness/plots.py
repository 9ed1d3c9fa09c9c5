"""The analysis figure: one row of panels per configuration (workload, setting, tp, model...: every grouping
key but the control plane), one panel per metric, the control planes on the x-axis in one fixed colour each
across every panel, p50 bars (median over repeats) with p99 whiskers, the legend outside the data. For
workload=serve rows ``plot_load``: latency and goodput against the achieved request rate, a line per plane."""

from __future__ import annotations

import os
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


def plane_order(planes) -> list[str]:
    """The planes in PLANE_ORDER, any other after them by name."""
    return sorted(set(planes), key=lambda c: (PLANE_ORDER.index(c) if c in PLANE_ORDER else 99, c))


def row_label(fig, ax, label: str, reps: pd.Series) -> None:
    """Write a row's configuration ``label`` and its repeats (``reps``: counts per line) above its first panel
    ``ax``, wrapped to the figure's width (~13 bold 8-pt characters an inch), growing upwards into the gap."""
    n = f"{int(reps.min())}" if reps.min() == reps.max() else f"{int(reps.min())}-{int(reps.max())}"
    text = textwrap.fill(f"{label}  ({n} repeats)", width=int(fig.get_size_inches()[0] * 13))
    note = ax.annotate(text, xy=(0, 1.2), xycoords="axes fraction", fontsize=8, va="bottom", fontweight="bold",
                       annotation_clip=False)
    note.set_in_layout(False)  # a long label must not squeeze the panels


def plot(df: pd.DataFrame, keys: list[str], out: str) -> None:
    """Write the figure of the ok rows ``df`` (key cells filled) grouped by ``keys`` to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rest = [k for k in keys if k != "control"]
    groups = list(df.groupby(rest, dropna=False)) if rest else [((), df)]
    panels = [p for p in PANELS if df[p[0]].notna().any()]
    planes = plane_order(df.control)
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
        row_label(fig, row[0], label, reps)
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


# the latency-vs-load figure of workload=serve rows: (column, title); the last panel is goodput where an SLO was
# set, else the completed rate
LOAD_PANELS = [("ttft_ms_p50", "TTFT p50 (ms)"), ("ttft_ms_p99", "TTFT p99 (ms)"), ("tpot_ms_p50", "TPOT p50 (ms)"),
               ("tpot_ms_p99", "TPOT p99 (ms)")]
TP_STYLES = ["-", "--", ":", "-."]


def load_path(out: str) -> str:
    """Where the latency-vs-load figure goes beside the bars' ``out``: out.png -> out_load.png."""
    root, ext = os.path.splitext(out)
    return f"{root}_load{ext}"


def load_points(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per request rate (sorted, inf last) of ``rows`` (one plane, one tp): x, the achieved sending rate
    (req/s; at rate inf, where all are sent at once, or without one, the completed rate ``req_s``),
    ``completed`` (x is req_s), and x's and ``metric``'s median, min and max over the repeats."""
    rate = pd.to_numeric(rows.request_rate, errors="coerce")
    rows = rows.assign(completed=np.isinf(rate) | rows.achieved_rate_req_s.isna())
    rows = rows.assign(x=rows.achieved_rate_req_s.where(~rows.completed, rows.req_s), y=rows[metric])
    rows = rows.dropna(subset=["x", "y"])
    g = rows.groupby("request_rate")
    out = pd.concat([g.x.agg(["median", "min", "max"]).add_prefix("x_"),
                     g.y.agg(["median", "min", "max"]).add_prefix("y_"), g.completed.any()], axis=1)
    return out.sort_index().reset_index()


def log_if_spread(ax, axis: str, values, ratio: float) -> None:
    """A log ``axis`` ("x" or "y") labelled 1, 2, 5, 10... when its positive ``values`` span ``ratio`` or more."""
    from matplotlib import ticker

    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values) & (values > 0)]
    if len(values) < 2 or values.max() / values.min() < ratio:
        return
    getattr(ax, f"set_{axis}scale")("log")
    target = ax.xaxis if axis == "x" else ax.yaxis
    subs = (1, 2, 5) if values.max() / values.min() > 30 else (1, 2, 3, 5, 7)  # a few labels, never crowded
    target.set_major_locator(ticker.LogLocator(base=10, subs=subs))
    target.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_formatter(ticker.NullFormatter())


def draw_load_panel(ax, rows: pd.DataFrame, metric: str, colours: dict, tps: list) -> None:
    """One panel: ``metric`` against the achieved rate, a line per (plane, tp) through the finite rates,
    rate inf as a hollow diamond at the completed rate; medians with min-max bars over the repeats."""
    xs, ys = [], []
    for (control, tp), line in rows.groupby(["control", "tp"]):
        pts = load_points(line, metric)
        style = TP_STYLES[tps.index(tp) % len(TP_STYLES)]
        for completed, part in pts.groupby("completed"):
            ax.errorbar(part.x_median, part.y_median, yerr=[part.y_median - part.y_min, part.y_max - part.y_median],
                        xerr=[part.x_median - part.x_min, part.x_max - part.x_median], color=colours[control],
                        linestyle="none" if completed else style, marker="D" if completed else "o",
                        markerfacecolor="white" if completed else colours[control], markersize=4, linewidth=1.2,
                        elinewidth=0.8, capsize=2)
        xs += [*pts.x_min, *pts.x_max]
        ys += [*pts.y_min, *pts.y_max]
    rate = metric in ("goodput_req_s", "req_s")
    if rate and xs:  # the rate sent: what a plane keeping up completes
        lo, hi = np.nanmin(xs + ys), np.nanmax(xs + ys)
        ax.plot([lo, hi], [lo, hi], color="grey", linestyle=":", linewidth=0.8)
    log_if_spread(ax, "x", xs, 4)
    log_if_spread(ax, "y", xs + ys if rate else ys, 4 if rate else 10)
    ax.grid(alpha=0.3)
    ax.grid(alpha=0.12, which="minor")
    ax.tick_params(labelsize=7)
    ax.set_xlabel("achieved rate (req/s)", fontsize=7)


def plot_load(df: pd.DataFrame, keys: list[str], out: str) -> None:
    """Write the latency-vs-load figure of the ok workload=serve rows ``df`` (key cells filled) to ``out``: a
    row of panels per configuration (every key but control, tp, request_rate), TTFT and TPOT p50/p99 (ms)
    and goodput (else the completed rate, req/s) against the achieved rate, a line per plane and tp."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    last = ("goodput_req_s", "goodput (req/s)") if df.goodput_req_s.notna().any() else ("req_s", "completed (req/s)")
    panels = LOAD_PANELS + [last]
    rest = [k for k in keys if k not in ("control", "tp", "request_rate")]
    groups = list(df.groupby(rest, dropna=False)) if rest else [((), df)]
    planes, tps = plane_order(df.control), sorted(df.tp.unique())
    colours = plane_colours(planes)
    fig, axes = plt.subplots(len(groups), len(panels), figsize=(3.3 * len(panels), 3.2 * len(groups) + 1.0),
                             squeeze=False, gridspec_kw={"hspace": 0.6})
    for row, (cfg, rows) in zip(axes, groups):
        cfg = cfg if isinstance(cfg, tuple) else (cfg,)
        for ax, (metric, title) in zip(row, panels):
            draw_load_panel(ax, rows, metric, colours, tps)
            ax.set_title(title, fontsize=8)
        label = " ".join(f"{k}={v}" for k, v in zip(rest, cfg) if v != "-") or "workload=serve"
        row_label(fig, row[0], label, rows.groupby(["control", "tp", "request_rate"]).size())
    same = ", ".join(f"{k}={df[k].iloc[0]}" for k in ("model", "device", "dtype") if df[k].nunique() == 1)
    fig.text(0.01, 0.995, same + "; median over repeats, bars min-max", fontsize=8, va="top")
    handles = [Line2D([], [], color=colours[c], marker="o", label=c) for c in planes]
    if len(tps) > 1:
        handles += [Line2D([], [], color="black", linestyle=TP_STYLES[i % len(TP_STYLES)], label=f"tp={tp:g}")
                    for i, tp in enumerate(tps)]
    handles += [Line2D([], [], color="black", marker="D", markerfacecolor="white", linestyle="none",
                       label="rate inf (x: its completed req/s)"),
                Line2D([], [], color="grey", linestyle=":", label="y = x")]
    height = fig.get_size_inches()[1]  # the legend in the top 0.5 inch, above the first row's label
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.2 / height))
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.6 / height, top=1 - 1.3 / height, wspace=0.3)
    fig.savefig(out, dpi=110)
    plt.close(fig)
