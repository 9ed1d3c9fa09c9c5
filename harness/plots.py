"""The bar figures. Raw metrics: a row of panels per configuration (every grouping key but control), a panel per
metric, a bar per plane: p50 (median over repeats) with a p99 whisker; configurations of one plane each pooled
per workload into shared rows. Exposed cost (``exposed.exposed_cost``): a panel per configuration that ran
``control=ideal``, per plane its exposed decode step p50 (circle) and TPOT p50 (square) in us with the spread,
the % of ideal's above; hollow within noise, half-filled with one repeat."""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from .exposed import ideal_apart
from .load_results import InputError
from .plot_common import (
    config_groups,
    config_labels,
    header_inches,
    label_space,
    label_text,
    plane_colours,
    plane_order,
    repeats_text,
    row_label,
    save_figure,
    short_plane,
    stack,
)

# (p50 column, p99 column or None, title)
PANELS = [("output_tok_s", None, "output tok/s"), ("tpot_ms_p50", "tpot_ms_p99", "TPOT (ms)"),
          ("decode_step_ms_p50", "decode_step_ms_p99", "decode step (ms)"),
          ("ctrl_oneway_us_p50", "ctrl_oneway_us_p99", "control one-way (us)")]
POOL = 5  # bars in a row of configurations pooled from one plane each
# metric (exposed.EXPOSED_METRICS' label): (marker, x offset from the plane's tick)
METRICS = {"decode step p50": ("o", -0.18), "TPOT p50": ("s", 0.18)}
COLUMNS = 3  # panels a row


def bar_rows(df: pd.DataFrame, rest: list[str]) -> tuple[str, list[tuple[str, list, list]]]:
    """(the words every row shares, the rows as (label, bars, key)), a bar as (tick, plane, its rows); the
    configurations of one plane pooled per workload (``pooled_row``)."""
    groups = config_groups(df, rest)
    shared, labels = config_labels(rest, [cfg for cfg, _ in groups])
    rows, single = [], {}
    for label, (cfg, part) in zip(labels, groups):
        if part.control.nunique() > 1 or len(groups) == 1:
            rows.append((label, [(c, c, part[part.control == c]) for c in plane_order(part.control)], []))
        else:
            workload = cfg[rest.index("workload")] if "workload" in rest else ""
            single.setdefault(workload, []).append((cfg, part))
    rows += [pooled_row(rest, pool[i:i + POOL], shared) for pool in single.values() for i in range(0, len(pool), POOL)]
    return shared, rows


def pooled_row(rest: list[str], chunk: list, shared: str) -> tuple[str, list, list]:
    """A row of up to POOL configurations of one plane each (``chunk``: (configuration, rows)): bars numbered,
    the key lines ``N: plane settings``; a lone one is labelled in full, its bar by its plane."""
    common, own = config_labels(rest, [cfg for cfg, _ in chunk])
    common = " ".join(w for w in (own[0] if len(chunk) == 1 else common).split() if w not in shared.split())
    planes = [part.control.iloc[0] for _, part in chunk]
    if len(chunk) == 1:
        return common, [(planes[0], planes[0], chunk[0][1])], []
    bars = [(str(n), plane, part) for n, (plane, (_, part)) in enumerate(zip(planes, chunk), 1)]
    key = [f"{n}: {short_plane(plane)}  {words}" for n, (plane, words) in enumerate(zip(planes, own), 1)]
    return f"{common} (one plane per configuration)".strip(), bars, key


def draw_bars(ax, bars: list, p50: str, p99: str | None, colours: dict) -> None:
    """One panel: a p50 bar (median over repeats) per bar that has ``p50``, a p99 whisker (median) on it."""
    bars = [b for b in bars if b[2][p50].notna().any()]
    med = [rows[p50].median() for _, _, rows in bars]
    top = [rows[p99].median() if p99 else np.nan for _, _, rows in bars]
    x = np.arange(len(bars))
    ax.bar(x, med, color=[colours[plane] for _, plane, _ in bars], width=0.7)
    ax.vlines(x, med, top, color="black", linewidth=1, capstyle="projecting")  # a NaN p99: no whisker
    ax.hlines(top, x - 0.15, x + 0.15, color="black", linewidth=1, capstyle="projecting")
    names, rotation, _ = ticks(bars)
    ax.set_xticks(x, names, rotation=rotation, fontsize=7)
    bar_axes(ax, len(bars))


def bar_axes(ax, n: int) -> None:
    """x limits for ``n`` ticks (one or two no wider than one of three), y grid and tick labels."""
    pad = max(3 - n, 0) / 2
    ax.set_xlim(-0.6 - pad, n - 0.4 + pad)
    ax.grid(axis="y", alpha=0.3)
    ax.tick_params(axis="y", labelsize=7)


def ticks(bars: list) -> tuple[list[str], int, float]:
    """(the bars' tick labels, their rotation, the inches they take under the panels)."""
    names = [textwrap.fill(short_plane(name), 13) for name, _, _ in bars]
    if bars[0][0].isdigit():
        return names, 0, 0.3
    if not any(" " in n for n in names):
        return names, 45, 0.55
    return names, 0, 0.3 + 0.12 * max(n.count("\n") + 1 for n in names)


def plot(df: pd.DataFrame, keys: list[str], out: str):
    """Write the raw-metric figure of the ok rows ``df`` (key cells filled) by ``keys`` to ``out``."""
    shared, rows = bar_rows(df, [k for k in keys if k != "control"])
    rows = [(label, bars, key, [p for p in PANELS if any(b[2][p[0]].notna().any() for b in bars)])
            for label, bars, key in rows]
    if not (rows := [r for r in rows if r[3]]):  # a row without any metric of PANELS is left out
        raise InputError(f"--plot: the rows hold none of {', '.join(t for _, _, t in PANELS)}; {out} not written")
    planes, colours = plane_colours(df.control)
    width = 3.6 * max([len(r[3]) for r in rows] + [1])
    handles = [Rectangle((0, 0), 1, 1, color=colours[c], label=short_plane(c)) for c in planes]
    note = "bars: median of the repeats' p50 (tok/s: of their value); whiskers: median of their p99 (not a spread)"
    header, top = header_inches(width, df, shared, note, [handles])
    texts = [label_text(label, [len(b[2]) for b in bars], width) for label, bars, _, _ in rows]
    keys_text = ["\n".join(textwrap.fill(line, int(width * 16), subsequent_indent="     ") for line in key)
                 for _, _, key, _ in rows]
    under = [ticks(bars)[2] for _, bars, _, _ in rows]
    below = [t + (0.1 + 0.13 * (k.count("\n") + 1) if k else 0) for t, k in zip(under, keys_text)]
    fig, axes = stack(round(width / 3.6), [(len(r[3]), label_space(t), b) for r, t, b in zip(rows, texts, below)], top)
    for row_axes, (_label, bars, _, panels), text, key, tick in zip(axes, rows, texts, keys_text, under):
        for ax, (p50, p99, title) in zip(row_axes, panels):
            draw_bars(ax, bars, p50, p99, colours)
            ax.set_title(title + (" p50, whisker p99" if p99 else ""), fontsize=8)
        row_label(row_axes[0], text)
        if key:  # under the tick labels, the key of the numbered bars
            row_axes[0].annotate(key, xy=(0, 0), xycoords="axes fraction", xytext=(0, -72 * tick),
                                 textcoords="offset points", fontsize=7, va="top", annotation_clip=False)
    save_figure(fig, header, [handles], out)


def panel_title(label: str, rows: pd.DataFrame) -> str:
    """A panel's title: its configuration, then ideal's step and TPOT and the repeats."""
    ideal = rows.groupby("metric").ideal_ms.first()
    parts = [f"{name} {ideal[m]:.3g} ms" for m, name in (("decode step p50", "step"), ("TPOT p50", "TPOT"))
             if m in ideal]
    reps = [int(r.split("/")[0]) for r in rows.repeats] + [int(rows.repeats.iloc[0].split("/")[1])]
    return f"{textwrap.fill(label, 50)}\nideal: {', '.join(parts)}; {repeats_text(reps)}".strip()


def draw_exposed(ax, rows: pd.DataFrame, colours: dict) -> None:
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
            ax.annotate(pct, (i + dx, top), xytext=(0, 7), textcoords="offset points",  # clear of the marker
                        rotation=90, fontsize=6.5, ha="center", va="bottom", annotation_clip=False)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(planes)), [textwrap.fill(short_plane(p), 14) for p in planes], fontsize=7)
    bar_axes(ax, len(planes))
    low, high = rows.low_us.min(), rows.high_us.max()
    span = max(high, 0) - min(low, 0) or 1.0
    ax.set_ylim(min(low, 0) - 0.1 * span, max(high, 0) + 0.3 * span)  # room for the % above the bars
    ax.set_ylabel("exposed cost (us)", fontsize=7)


def legends(planes: list, colours: dict, verdicts: pd.Series) -> list[list]:
    """Two legends: the planes' colours; the metrics' markers and what the fills drawn (of ``verdicts``) say."""
    noise, one = verdicts == "within noise", verdicts.str.startswith("one repeat")

    def point(label, marker="o", fillstyle="full", color="dimgrey"):
        return Line2D([], [], color=color, marker=marker, fillstyle=fillstyle, markerfacecoloralt="white",
                      linestyle="none", label=label)

    below = "; below 0: ideal no floor (noise: no plane beats no transport)" if (
        verdicts == "ideal no floor").any() else ""
    return [[point(short_plane(p), color=colours[p]) for p in planes],
            [point(m, marker, color="black") for m, (marker, _) in METRICS.items()]
            + [p for p, drawn in ((point("filled: spread excludes 0" + below), ~noise & ~one),
                                  (point("hollow: within noise (spread holds 0)", fillstyle="none"), noise),
                                  (point("half: one repeat, no spread", fillstyle="left"), one)) if drawn.any()]]


def plot_exposed(df: pd.DataFrame, keys: list[str], out: str, table: pd.DataFrame):
    """Write the figure of ``table`` (not empty: the ``exposed_cost`` of the ok rows ``df``) to ``out``."""
    others = list(table.columns[:list(table.columns).index("control")])
    groups = config_groups(table, others, sort=False)
    shared, labels = config_labels(others, [cfg for cfg, _ in groups])
    planes, colours = plane_colours(table.control)
    handles = legends(planes, colours, table.verdict)
    ncols = min(COLUMNS, len(groups))
    col_w = max(4.2, 7.5 / ncols)  # one panel: wide enough for the legend
    note = ("exposed control-plane cost: each plane's median minus control=ideal's (no transport), error bar "
            "[plane min - ideal max, plane max - ideal min] over repeats, % of ideal's")
    header, top = header_inches(col_w * ncols, df, shared, note, handles)
    apart = "\nideal's batches differ: no floor (the table's note)"
    titles = [panel_title(label, rows) + apart * bool(ideal_apart(rows).any())
              for label, (_, rows) in zip(labels, groups)]
    rows = [titles[i:i + ncols] for i in range(0, len(titles), ncols)]
    fig, axes = stack(ncols, [(len(r), 0.2 + 0.14 * max(t.count("\n") + 1 for t in r), 0.45) for r in rows], top,
                      col_w=col_w)
    for ax, (_, rows), title in zip([a for row in axes for a in row], groups, titles):
        draw_exposed(ax, rows, colours)
        ax.set_title(title, fontsize=7.5)
    save_figure(fig, header, handles, out)
