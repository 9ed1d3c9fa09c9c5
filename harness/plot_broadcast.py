"""The broadcast figure of workload=broadcast rows: one-way latency p50 and p99 against the message size (log),
a line per plane (colour) and tp (style), a marker per payload kind, medians over repeats with min-max bars;
a row of the two panels per other configuration."""

from __future__ import annotations

import re
from functools import partial

import numpy as np
import pandas as pd

from .plot_common import TP_STYLES, log_if_spread, plot_curves, short_plane, tp_handles

PANELS = [("ctrl_oneway_us_p50", "one-way p50 (us)"), ("ctrl_oneway_us_p99", "one-way p99 (us)")]
KINDS = {"decode": "o", "prefill": "^", "raw": "s"}  # payload name's first word: marker; others "D"
# overrides that only pick the payloads (the x points), not another configuration
PAYLOAD_LIST = re.compile(r"workload\.(decode_batches|prefill_batches|raw_bytes)=")


def kind(payload: str) -> str:
    """decode-8 -> decode, raw-256B -> raw, prefill-1x1024 -> prefill."""
    return str(payload).split("-")[0]


def size(value: float, _=None) -> str:
    """A size in bytes as a tick: 100 B, 1 kB, 10 MB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:g} {unit}"
    return f"{value:g} B"


def size_axis(ax, xs: list) -> None:
    """A log x-axis of sizes from a third of the smallest to three times the largest of ``xs``, ticks at 1, 10,
    100 (1, 2, 5 under two decades), labelled 100 B, 1 kB."""
    from matplotlib import ticker

    xs = np.asarray([x for x in xs if x > 0], dtype=float)
    ax.set_xscale("log")
    if len(xs):
        ax.set_xlim(xs.min() / 3, xs.max() * 3)
    wide = len(xs) and xs.max() / xs.min() > 100
    ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1,) if wide else (1, 2, 5)))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(size))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())


def points(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per payload of ``rows`` (one plane and tp), by size: bytes, kind, ``metric``'s median, min, max."""
    rows = rows.dropna(subset=[metric, "payload_bytes"])
    g = rows.groupby("payload")
    out = pd.concat([g.payload_bytes.median().rename("x"), g[metric].agg(["median", "min", "max"])], axis=1)
    return out.assign(kind=[kind(p) for p in out.index]).sort_values("x")


def draw_panel(ax, rows: pd.DataFrame, metric: str, colours: dict, tps: list) -> None:
    """One panel: ``metric`` against the message size, a line per (plane, tp), a marker per payload kind."""
    xs, ys = [], []
    for (control, tp), line in rows.groupby(["control", "tp"]):
        pts = points(line, metric)
        style = TP_STYLES[tps.index(tp) % len(TP_STYLES)]
        ax.plot(pts.x, pts["median"], color=colours[control], linestyle=style, linewidth=1.2)
        for k, part in pts.groupby("kind"):
            ax.errorbar(part.x, part["median"], yerr=[part["median"] - part["min"], part["max"] - part["median"]],
                        color=colours[control], marker=KINDS.get(k, "D"), markersize=4, linestyle="none",
                        elinewidth=0.8, capsize=2)
        ys += [*pts["min"], *pts["max"]]
        xs += list(pts.x)
    size_axis(ax, xs)
    log_if_spread(ax, "y", ys, 10)
    ax.grid(alpha=0.3)
    ax.tick_params(labelsize=7)
    ax.set_xlabel("message size (payload_bytes)", fontsize=7)


def legend(planes: list, tps: list, colours: dict, kinds: list) -> list:
    """The planes' colours, the tps' line styles (more than one), the payload kinds' markers."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colours[c], linewidth=2, label=short_plane(c)) for c in planes]
    markers = [Line2D([], [], color="black", marker=KINDS.get(k, "D"), linestyle="none", label=k) for k in kinds]
    return handles + tp_handles(tps) + markers


def plot_broadcast(df: pd.DataFrame, keys: list[str], out: str):
    """Write the broadcast figure of the ok rows ``df`` (key cells filled) by ``keys`` to ``out``; returns it."""
    df = df.assign(payload_bytes=pd.to_numeric(df.payload_bytes, errors="coerce"))
    if "overrides" in df:
        df["overrides"] = [" ".join(w for w in str(o).split() if not PAYLOAD_LIST.match(w)) or "-"
                           for o in df.overrides]
    rest = [k for k in keys if k not in ("control", "tp", "payload") and df[k].nunique(dropna=False) > 1]
    kinds = sorted({kind(p) for p in df.payload})
    return plot_curves(df, rest, "payload", PANELS, partial(legend, kinds=kinds), draw_panel, out, col_w=4.6,
                       panel_h=2.8)
