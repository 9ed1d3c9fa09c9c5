"""The raw-metric figure: a row of panels per configuration (every grouping key but control), a panel per metric
the row has, a bar per plane: p50 (median over repeats) with a p99 whisker. Configurations of one plane each
are pooled per workload into shared rows (a bar per configuration, labelled with what sets it apart)."""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd

from .plot_common import (
    config_groups,
    config_labels,
    header_inches,
    label_space,
    label_text,
    plane_colours,
    plane_order,
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


def bar_rows(df: pd.DataFrame, rest: list[str]) -> tuple[str, list[tuple[str, list, list]]]:
    """(the words every row shares, the rows as (label, bars, key)), a bar as (tick, plane, its rows). A
    configuration with two planes or more is a row; those of one plane are pooled per workload (``pooled_row``)."""
    groups = config_groups(df, rest)
    shared, labels = config_labels(rest, [cfg for cfg, _ in groups])
    rows, single = [], {}
    for label, (cfg, part) in zip(labels, groups):
        if part.control.nunique() > 1 or len(groups) == 1:
            rows.append((label, [(c, c, part[part.control == c]) for c in plane_order(part.control)], []))
        else:
            workload = cfg[rest.index("workload")] if "workload" in rest else ""
            single.setdefault(workload, []).append((cfg, part))
    for pool in single.values():
        for i in range(0, len(pool), POOL):
            rows.append(pooled_row(rest, pool[i:i + POOL], shared))
    return shared, rows


def pooled_row(rest: list[str], chunk: list, shared: str) -> tuple[str, list, list]:
    """A row of up to POOL configurations of one plane each (``chunk``: (configuration, rows)): bars numbered,
    the key lines ``N: plane settings``; a lone one is labelled in full, its bar by its plane."""
    common, own = config_labels(rest, [cfg for cfg, _ in chunk])
    if len(chunk) == 1:
        common, own = own[0], [""]
    common = " ".join(w for w in common.split() if w not in shared.split())
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
    for xi, m, t in zip(x, med, top):
        if not np.isnan(t):
            ax.plot([xi, xi], [m, t], color="black", linewidth=1)
            ax.plot([xi - 0.15, xi + 0.15], [t, t], color="black", linewidth=1)
    names, rotation, _ = ticks(bars)
    ax.set_xticks(x, names, rotation=rotation, fontsize=7)
    pad = max(3 - len(bars), 0) / 2  # a lone bar is no wider than one of three
    ax.set_xlim(-0.6 - pad, len(bars) - 0.4 + pad)
    ax.grid(axis="y", alpha=0.3)
    ax.tick_params(axis="y", labelsize=7)


def ticks(bars: list) -> tuple[list[str], int, float]:
    """(the bars' tick labels, wrapped names; their rotation: 45 degrees for plane names alone; the inches they
    take under the panels)."""
    names = [textwrap.fill(short_plane(name), 13) for name, _, _ in bars]
    if bars[0][0].isdigit():
        return names, 0, 0.3
    if not any(" " in n for n in names):
        return names, 45, 0.55
    return names, 0, 0.3 + 0.12 * max(n.count("\n") + 1 for n in names)


def plot(df: pd.DataFrame, keys: list[str], out: str):
    """Write the raw-metric figure of the ok rows ``df`` (key cells filled) by ``keys`` to ``out``; returns it."""
    from matplotlib.patches import Rectangle

    rest = [k for k in keys if k != "control"]
    shared, rows = bar_rows(df, rest)
    rows = [(label, bars, key, [p for p in PANELS if any(b[2][p[0]].notna().any() for b in bars)])
            for label, bars, key in rows]
    rows = [r for r in rows if r[3]]  # a row without any metric of PANELS
    planes = plane_order(df.control)
    colours = plane_colours(planes)
    width = 3.6 * max([len(r[3]) for r in rows] + [1])
    handles = [Rectangle((0, 0), 1, 1, color=colours[c], label=short_plane(c)) for c in planes]
    note = "bars: median of the repeats' p50 (tok/s: of their value); whiskers: median of their p99 (not a spread)"
    header, top = header_inches(width, df, shared, note, [handles])
    texts = [label_text(label, [len(b[2]) for b in bars], width) for label, bars, _, _ in rows]
    keys_text = ["\n".join(textwrap.fill(line, int(width * 16), subsequent_indent="     ") for line in key)
                 for _, _, key, _ in rows]
    under = [ticks(bars)[2] for _, bars, _, _ in rows]
    below = [t + (0.1 + 0.13 * (k.count("\n") + 1) if k else 0) for t, k in zip(under, keys_text)]
    fig, axes = stack(round(width / 3.6), [(len(r[3]), label_space(t), b) for r, t, b in zip(rows, texts, below)],
                      top)
    for row_axes, (_label, bars, _, panels), text, key, tick in zip(axes, rows, texts, keys_text, under):
        for ax, (p50, p99, title) in zip(row_axes, panels):
            draw_bars(ax, bars, p50, p99, colours)
            ax.set_title(title + (" p50, whisker p99" if p99 else ""), fontsize=8)
        row_label(row_axes[0], text)
        if key:  # under the tick labels, the key of the numbered bars
            row_axes[0].annotate(key, xy=(0, 0), xycoords="axes fraction", xytext=(0, -72 * tick),
                                 textcoords="offset points", fontsize=7, va="top", annotation_clip=False)
    return save_figure(fig, header, [handles], out)
