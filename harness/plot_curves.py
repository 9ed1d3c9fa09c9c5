"""The curve figures: a line per plane (colour) and tp (style) through the medians over repeats, min-max bars, a
row of panels per other configuration. workload=broadcast rows: one-way latency p50 and p99 against the message
size (log), a line and a marker per payload kind. workload=serve rows: TTFT and TPOT p50/p99 (ms) and goodput (else the
completed rate, req/s) against the achieved rate."""

from __future__ import annotations

import re
from functools import partial

import numpy as np
import pandas as pd
from matplotlib import ticker
from matplotlib.lines import Line2D

from .plot_common import curves_figure, short_plane

TP_STYLES = ["-", "--", ":", "-."]
TP_MARKERS = ["o", "s", "^", "v"]  # with the line style: a lone point still shows its tp
PANELS = [("ctrl_oneway_us_p50", "one-way p50 (us)"), ("ctrl_oneway_us_p99", "one-way p99 (us)")]
KINDS = {"decode": "o", "prefill": "^", "raw": "s"}  # payload name's first word: marker; others "D"
# overrides that only pick the payloads (the x points), not another configuration
PAYLOAD_LIST = re.compile(r"workload\.(decode_batches|prefill_batches|raw_bytes)=")
# (column, title); then "rate": goodput where a section's rows set an SLO, else the completed rate
LOAD_PANELS = [("ttft_ms_p50", "TTFT p50 (ms)"), ("ttft_ms_p99", "TTFT p99 (ms)"), ("tpot_ms_p50", "TPOT p50 (ms)"),
               ("tpot_ms_p99", "TPOT p99 (ms)")]


def tp_look(i: int) -> tuple[str, str]:
    """The line style and marker of the i-th tp of a figure."""
    return TP_STYLES[i % len(TP_STYLES)], TP_MARKERS[i % len(TP_MARKERS)]


def log_if_spread(ax, axis: str, values, ratio: float) -> None:
    """A log ``axis`` ("x" or "y") labelled 1, 2, 5, 10... when its positive ``values`` span ``ratio`` or more."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values) & (values > 0)]
    if len(values) < 2 or values.max() / values.min() < ratio:
        return
    getattr(ax, f"set_{axis}scale")("log")
    target = ax.xaxis if axis == "x" else ax.yaxis
    subs = (1, 2, 5) if values.max() / values.min() > 30 else (1, 2, 3, 5, 7)  # a few labels, never crowded
    target.set_major_locator(ticker.LogLocator(base=10, subs=subs))
    target.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}".replace("e+0", "e").replace("e+", "e")))
    target.set_minor_formatter(ticker.NullFormatter())


def size_axis(ax, xs: list) -> None:
    """A log x-axis of sizes, a third of the smallest ``xs`` to thrice the largest, ticks labelled 100 B, 1 kB."""
    xs = np.asarray([x for x in xs if x > 0], dtype=float)
    ax.set_xscale("log")
    if len(xs):
        ax.set_xlim(xs.min() / 3, xs.max() * 3)
    wide = len(xs) and xs.max() / xs.min() > 100
    ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1,) if wide else (1, 2, 5)))
    ax.xaxis.set_major_formatter(ticker.EngFormatter(unit="B"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())


def points(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per payload of ``rows`` (one plane and tp), by size: bytes, kind, ``metric``'s median, min, max."""
    out = rows.dropna(subset=[metric, "payload_bytes"]).groupby("payload").agg(
        x=("payload_bytes", "median"), median=(metric, "median"), min=(metric, "min"), max=(metric, "max"))
    return out.assign(kind=[str(p).split("-")[0] for p in out.index]).sort_values("x")


def draw_panel(ax, rows: pd.DataFrame, metric: str, colours: dict, _tps: list) -> None:
    """One panel (of one tp: ``plot_broadcast``): ``metric`` against the message size, a solid line per (plane,
    payload kind), a marker per kind (a line across kinds would join unrelated messages of near sizes: raw 64 kB and
    a 16 x 1,024 prefill)."""
    xs, ys = [], []
    for (control, _), line in rows.groupby(["control", "tp"]):
        pts = points(line, metric)
        for k, part in pts.groupby("kind"):
            ax.plot(part.x, part["median"], color=colours[control], linestyle="-", linewidth=1.2)
            ax.errorbar(part.x, part["median"], yerr=[part["median"] - part["min"], part["max"] - part["median"]],
                        color=colours[control], marker=KINDS.get(k, "D"), markersize=4, linestyle="none",
                        elinewidth=0.8, capsize=2)
        ys += [*pts["min"], *pts["max"]]
        xs += list(pts.x)
    size_axis(ax, xs)
    log_if_spread(ax, "y", ys, 10)


def legend(planes: list, _tps: list, colours: dict, kinds: list) -> list:
    """The planes' colours, the payload kinds' markers (no line style per tp: a row of panels per tp)."""
    handles = [Line2D([], [], color=colours[c], linewidth=2, label=short_plane(c)) for c in planes]
    return handles + [Line2D([], [], color="black", marker=KINDS.get(k, "D"), linestyle="none", label=k) for k in kinds]


def plot_broadcast(df: pd.DataFrame, keys: list[str], out: str):
    """Write the broadcast figure of the ok rows ``df`` (key cells filled) by ``keys`` to ``out``."""
    df = df.assign(payload_bytes=pd.to_numeric(df.payload_bytes, errors="coerce"))
    df["overrides"] = [" ".join(w for w in str(o).split() if not PAYLOAD_LIST.match(w)) or "-" for o in df.overrides]
    rest = [k for k in keys if k not in ("control", "tp", "payload") and df[k].nunique(dropna=False) > 1]
    kinds = sorted({str(p).split("-")[0] for p in df.payload})
    if df.tp.nunique() > 1:  # a row of panels per tp: 5 planes x 3 tps x 3 kinds of line in one panel: unreadable
        rest.append("tp")
    curves_figure(df, rest, "payload", "message size (payload_bytes)", PANELS, partial(legend, kinds=kinds), draw_panel,
                  out, col_w=4.6, panel_h=2.8)


def load_points(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per request rate (inf last) of ``rows`` (one plane and tp): median, min, max over repeats of x, the achieved
    rate (req/s; the completed req_s where there is none: rate inf without ``max_concurrency``), and of ``metric``;
    ``inf``: the rate is inf."""
    inf = np.isinf(pd.to_numeric(rows.request_rate, errors="coerce"))
    rows = rows.assign(inf=inf, x=rows.achieved_rate_req_s.fillna(rows.req_s), y=rows[metric])
    g = rows.dropna(subset=["x", "y"]).groupby("request_rate")
    out = pd.concat([g.x.agg(["median", "min", "max"]).add_prefix("x_"),
                     g.y.agg(["median", "min", "max"]).add_prefix("y_"), g.inf.any()], axis=1)
    return out.sort_index().reset_index()


def draw_load_panel(ax, rows: pd.DataFrame, metric: str, colours: dict, tps: list) -> None:
    """One panel: ``metric`` against the achieved rate, a line per (plane, tp) through the finite rates, rate
    inf a hollow diamond; ideal's TTFT and rates faint at tp > 1: they follow its recording's admissions, no floor,
    as the tables' parentheses say (docs/SERVE.md)."""
    if metric == "rate":  # per section: goodput where its rows set an SLO, else the completed rate
        metric = "goodput_req_s" if rows.goodput_req_s.notna().any() else "req_s"
        ax.set_title("goodput (req/s)" if metric == "goodput_req_s" else "completed (req/s)")
    xs, ys, rate = [], [], metric in ("goodput_req_s", "req_s")
    for (control, tp), line in rows.groupby(["control", "tp"]):
        pts = load_points(line, metric)
        style, marker = tp_look(tps.index(tp))
        faint = control == "ideal" and _replays(tp) and (metric.startswith("ttft") or rate)
        for inf, part in pts.groupby("inf"):  # unbounded at rate inf: on y = x in the completed panel, by construction
            ax.errorbar(part.x_median, part.y_median, yerr=[part.y_median - part.y_min, part.y_max - part.y_median],
                        xerr=[part.x_median - part.x_min, part.x_max - part.x_median], color=colours[control],
                        linestyle="none" if inf else style, marker="D" if inf else marker,
                        markerfacecolor="white" if inf else colours[control], markersize=4, linewidth=1.2,
                        elinewidth=0.8, capsize=2, alpha=0.35 if faint else 1.0)
        xs += [*pts.x_min, *pts.x_max]
        ys += [*pts.y_min, *pts.y_max]
    if rate and xs:  # the rate sent: what a plane keeping up completes
        both = np.asarray(xs + ys, dtype=float)
        lo, hi = np.nanmin(both[both > 0], initial=np.nanmax(both)), np.nanmax(both)  # 0 has no place on a log x
        ax.plot([lo, hi], [lo, hi], color="grey", linestyle=":", linewidth=0.8)
    if rate and np.nanmin(ys, initial=np.inf) > 0:  # one scale on both axes, or y = x would not be its line
        log_if_spread(ax, "x", xs + ys, 4)
        log_if_spread(ax, "y", xs + ys, 4)
    elif not rate:  # p50 and p99 of a metric on one kind of axis, from the values of both
        log_if_spread(ax, "x", xs, 4)
        log_if_spread(ax, "y", rows[[f"{metric[:-4]}_p50", f"{metric[:-4]}_p99"]].to_numpy().ravel(), 10)
    # else a goodput of 0 (every request missed the SLO): linear axes, where it is drawn
    ax.grid(alpha=0.12, which="minor")


def _replays(tp) -> bool:
    """Whether ideal replays a recording at ``tp`` (tp > 1; at tp=1 rank 0 alone runs as any plane does)."""
    return pd.to_numeric(tp, errors="coerce") > 1


def plot_load(df: pd.DataFrame, keys: list[str], out: str):
    """Write the latency-vs-load figure of the ok rows ``df`` (key cells filled) by ``keys`` to ``out``."""
    rest = [k for k in keys if k not in ("control", "tp", "request_rate")]
    inf = np.isinf(pd.to_numeric(df.request_rate, errors="coerce")).any()
    curves_figure(df, rest, "request_rate", "achieved rate (req/s)", LOAD_PANELS + [("rate", "")],
                  partial(load_legend, rate_inf=bool(inf)), draw_load_panel, out, col_w=3.3,
                  blank_label="workload=serve")


def load_legend(planes: list, tps: list, colours: dict, rate_inf: bool) -> list:
    """The planes, the tps' line styles and markers, rate inf where a point is drawn for it, y = x."""
    faint = " (TTFT, rates faint: no floor" + (")" if all(map(_replays, tps)) else " at tp > 1)")
    replayed = any(map(_replays, tps))
    handles = [Line2D([], [], color=colours[c], marker="o" if len(tps) == 1 else None,
                      label=c + faint * (c == "ideal" and replayed)) for c in planes]
    diamond = [Line2D([], [], color="black", marker="D", markerfacecolor="white", linestyle="none",
                      label="rate inf (x: sent req/s, else completed)")] if rate_inf else []
    styles = [Line2D([], [], color="black", linestyle=tp_look(i)[0], marker=tp_look(i)[1], label=f"tp={tp:g}")
              for i, tp in enumerate(tps) if len(tps) > 1]  # none for a single tp
    return handles + styles + diamond + [Line2D([], [], color="grey", linestyle=":", label="y = x")]
