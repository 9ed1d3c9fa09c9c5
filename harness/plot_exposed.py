"""The headline figure, ``exposed.exposed_cost`` drawn: a panel per configuration that ran ``control=ideal``;
per plane its exposed decode step p50 (circle) and TPOT p50 (square) in us, the spread as error bar, the % of
ideal's above; hollow within noise, half-filled with one repeat, a line at 0 (ideal)."""

from __future__ import annotations

import textwrap

import pandas as pd

from .exposed import exposed_cost
from .plot_common import (
    config_groups,
    config_labels,
    header_inches,
    plane_colours,
    plane_order,
    repeats_text,
    save_figure,
    short_plane,
    stack,
)

# metric (exposed.EXPOSED_METRICS' label): (marker, x offset from the plane's tick)
METRICS = {"decode step p50": ("o", -0.18), "TPOT p50": ("s", 0.18)}
COLUMNS = 3  # panels a row


def panel_title(label: str, rows: pd.DataFrame) -> str:
    """A panel's title: its configuration, then ideal's step and TPOT and the repeats."""
    ideal = rows.groupby("metric").ideal_ms.first()
    parts = [f"{name} {ideal[m]:.3g} ms" for m, name in (("decode step p50", "step"), ("TPOT p50", "TPOT"))
             if m in ideal]
    reps = [int(r.split("/")[0]) for r in rows.repeats] + [int(rows.repeats.iloc[0].split("/")[1])]
    return f"{textwrap.fill(label, 50)}\nideal: {', '.join(parts)}; {repeats_text(reps)}".strip()


def draw_panel(ax, rows: pd.DataFrame, colours: dict) -> None:
    """One configuration's points: per plane and metric its exposed cost (us) with the spread, its %."""
    planes = plane_order(rows.control)
    for i, plane in enumerate(planes):
        mine = rows[rows.control == plane]
        top = mine.high_us.max()  # every % of a plane above all of its bars, so none sits on a neighbour's
        for _, r in mine.iterrows():
            marker, dx = METRICS.get(r.metric, ("D", 0))
            fill = "none" if r.verdict == "within noise" else ("left" if r.verdict.startswith("one repeat") else "full")
            ax.errorbar(i + dx, r.exposed_us, yerr=[[r.exposed_us - r.low_us], [r.high_us - r.exposed_us]],
                        marker=marker, color=colours[plane], fillstyle=fill, markerfacecoloralt="white",
                        markersize=6, elinewidth=1.1, capsize=2.5, linestyle="none")
            pct = f"{r.exposed_pct:+.1f}%".replace("-0.0%", "+0.0%")
            ax.annotate(pct, (i + dx, max(top, 0)), xytext=(0, 4), textcoords="offset points",
                        rotation=90, fontsize=6.5, ha="center", va="bottom", annotation_clip=False)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(planes)), [textwrap.fill(short_plane(p), 14) for p in planes], fontsize=7)
    pad = max(3 - len(planes), 0) / 2  # one or two planes: no wider than one of three
    ax.set_xlim(-0.6 - pad, len(planes) - 0.4 + pad)
    low, high = rows.low_us.min(), rows.high_us.max()
    span = max(high, 0) - min(low, 0) or 1.0
    ax.set_ylim(min(low, 0) - 0.06 * span, max(high, 0) + 0.3 * span)  # room for the % above the bars
    ax.set_ylabel("exposed (us)", fontsize=7)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(axis="y", alpha=0.3)


def legends(planes: list, colours: dict) -> list[list]:
    """Two legends: the planes' colours; the metrics' markers and what a point's fill says."""
    from matplotlib.lines import Line2D

    def point(label, marker="o", fillstyle="full", color="dimgrey"):
        return Line2D([], [], color=color, marker=marker, fillstyle=fillstyle, markerfacecoloralt="white",
                      linestyle="none", label=label)

    return [[point(short_plane(p), color=colours[p]) for p in planes],
            [point(m, marker, color="black") for m, (marker, _) in METRICS.items()]
            + [point("filled: spread excludes 0"), point("hollow: within noise (spread holds 0)", fillstyle="none"),
               point("half: one repeat, no spread", fillstyle="left")]]


def plot_exposed(df: pd.DataFrame, keys: list[str], out: str, table: pd.DataFrame | None = None):
    """Write the exposed-cost figure of the ok rows ``df`` (key cells filled) grouped by ``keys`` to ``out``
    (``table``: their ``exposed_cost``, if computed); returns the Figure, None (nothing written) without one."""
    table = exposed_cost(df, keys) if table is None else table
    if table.empty:
        return None
    others = list(table.columns[:list(table.columns).index("control")])
    groups = config_groups(table, others, sort=False)
    shared, labels = config_labels(others, [cfg for cfg, _ in groups])
    planes = plane_order(table.control)
    colours = plane_colours(planes)
    handles = legends(planes, colours)
    ncols = min(COLUMNS, len(groups))
    col_w = max(4.2, 7.5 / ncols)  # one panel: wide enough for the legend
    width = col_w * ncols
    note = ("each plane's median minus control=ideal's, error bar [plane min - ideal max, plane max - ideal "
            "min] over repeats, % of ideal's")
    header, top = header_inches(width, df, shared, note, handles)
    titles = [panel_title(label, rows) for label, (_, rows) in zip(labels, groups)]
    rows = [titles[i:i + ncols] for i in range(0, len(titles), ncols)]
    fig, axes = stack(ncols, [(len(r), 0.2 + 0.14 * max(t.count("\n") + 1 for t in r), 0.45) for r in rows], top,
                      col_w=col_w)
    for ax, (_, rows), title in zip([a for row in axes for a in row], groups, titles):
        draw_panel(ax, rows, colours)
        ax.set_title(title, fontsize=7.5)
    return save_figure(fig, header, handles, out)
