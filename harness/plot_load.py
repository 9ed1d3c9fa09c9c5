"""The latency-vs-load figure of workload=serve rows: TTFT and TPOT p50/p99 (ms) and goodput (else the completed
rate, req/s) against the achieved rate, a line per plane and tp."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .plot_common import TP_STYLES, log_if_spread, plot_curves, tp_handles

# (column, title); then goodput where an SLO was set, else the completed rate
LOAD_PANELS = [("ttft_ms_p50", "TTFT p50 (ms)"), ("ttft_ms_p99", "TTFT p99 (ms)"), ("tpot_ms_p50", "TPOT p50 (ms)"),
               ("tpot_ms_p99", "TPOT p99 (ms)")]


def load_points(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per request rate (inf last) of ``rows`` (one plane and tp): ``completed`` (x is req_s: at rate inf, all
    sent at once, or without an achieved rate) and the median, min and max over repeats of x, the achieved
    rate (req/s), and of ``metric``."""
    rate = pd.to_numeric(rows.request_rate, errors="coerce")
    rows = rows.assign(completed=np.isinf(rate) | rows.achieved_rate_req_s.isna())
    rows = rows.assign(x=rows.achieved_rate_req_s.where(~rows.completed, rows.req_s), y=rows[metric])
    rows = rows.dropna(subset=["x", "y"])
    g = rows.groupby("request_rate")
    out = pd.concat([g.x.agg(["median", "min", "max"]).add_prefix("x_"),
                     g.y.agg(["median", "min", "max"]).add_prefix("y_"), g.completed.any()], axis=1)
    return out.sort_index().reset_index()


def draw_load_panel(ax, rows: pd.DataFrame, metric: str, colours: dict, tps: list) -> None:
    """One panel: ``metric`` against the achieved rate, a line per (plane, tp) through the finite rates, rate
    inf a hollow diamond; ideal's TTFT faint: it follows its recording's admissions, no floor (docs/SERVE.md)."""
    xs, ys = [], []
    for (control, tp), line in rows.groupby(["control", "tp"]):
        pts = load_points(line, metric)
        style = TP_STYLES[tps.index(tp) % len(TP_STYLES)]
        faint = control == "ideal" and metric.startswith("ttft")
        for completed, part in pts.groupby("completed"):
            if completed and metric == "req_s":  # rate inf sits at its completed rate: on y = x by construction
                continue
            ax.errorbar(part.x_median, part.y_median, yerr=[part.y_median - part.y_min, part.y_max - part.y_median],
                        xerr=[part.x_median - part.x_min, part.x_max - part.x_median], color=colours[control],
                        linestyle="none" if completed else style, marker="D" if completed else "o",
                        markerfacecolor="white" if completed else colours[control], markersize=4, linewidth=1.2,
                        elinewidth=0.8, capsize=2, alpha=0.35 if faint else 1.0)
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


def plot_load(df: pd.DataFrame, keys: list[str], out: str):
    """Write the latency-vs-load figure of the ok rows ``df`` (key cells filled) to ``out``, a row per value of the
    ``keys`` but control, tp and request_rate; returns it."""
    last = ("goodput_req_s", "goodput (req/s)") if df.goodput_req_s.notna().any() else ("req_s", "completed (req/s)")
    rest = [k for k in keys if k not in ("control", "tp", "request_rate")]
    return plot_curves(df, rest, "request_rate", LOAD_PANELS + [last], load_legend, draw_load_panel, out, col_w=3.3,
                       blank_label="workload=serve")


def load_legend(planes: list, tps: list, colours: dict) -> list:
    """The planes, the tps' line styles, rate inf, y = x."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colours[c], marker="o", label=c + (" (TTFT faint: no floor)" if c == "ideal"
                                                                          else "")) for c in planes]
    rate_inf = Line2D([], [], color="black", marker="D", markerfacecolor="white", linestyle="none",
                      label="rate inf (x: its completed req/s)")
    return handles + tp_handles(tps) + [rate_inf, Line2D([], [], color="grey", linestyle=":", label="y = x")]
