"""What the analysis figures share: a plane's colour and place, how a configuration is written (1.0 as 1, the
keys every panel shares said once), the header and legends at the top, the layout of rows of panels."""

from __future__ import annotations

import contextlib
import math
import os
import textwrap

import numpy as np
import pandas as pd

from .conf_paths import cannot_write
from .host_cpu import busy_note
from .load_results import InputError

PLANE_ORDER = ["ideal", "shm", "queue", "pipe", "gloo", "ring", "zmq", "hybrid"]
# named in the header (and above the tables) when one value holds
SAME = ("model", "device", "dtype", "workload", "tp", "payload", "burstiness", "max_concurrency", "slo")


def plane_colours(control) -> tuple[list[str], dict[str, str]]:
    """(``plane_order(control)``, a plane's colour in every figure: tab10, in PLANE_ORDER; the k-th of a plane's n
    names (``ring``, ``ring control.options.spin_us=0``) its plane's, lightened toward white by 0.6 k / n)."""
    import matplotlib

    planes = plane_order(control)
    cmap = matplotlib.colormaps["tab10"]
    extra = sorted({base_plane(p) for p in planes} - set(PLANE_ORDER))
    known = {p: np.array(cmap(i % 10)) for i, p in enumerate(PLANE_ORDER + extra)}
    variants: dict[str, list[str]] = {}  # per base plane its names, in order
    for name in planes:
        variants.setdefault(base_plane(name), []).append(name)
    return planes, {name: tuple(known[base] + (1 - known[base]) * (0.6 * k / len(names)))
                    for base, names in variants.items() for k, name in enumerate(names)}


def base_plane(name: str) -> str:
    """``ring control.options.spin_us=0`` -> ``ring``."""
    return str(name).split()[0]


def plane_order(planes) -> list[str]:
    """The planes in PLANE_ORDER, any other after them by name (a plane's variants after the plane)."""
    order = {p: i for i, p in enumerate(PLANE_ORDER)}
    return sorted(set(planes), key=lambda c: (order.get(base_plane(c), 99), base_plane(c), c))


def key_cell(value):
    """A configuration cell as a table shows it: a float as 4, 0.5 or inf (not 4.0), anything else as is."""
    return f"{value:g}" if isinstance(value, (float, np.floating)) else value


def cell(value) -> str:
    """A configuration value as a label shows it: ``key_cell``'s, as text; empty for a missing one ("-")."""
    return "" if pd.isna(value) or value == "-" else str(key_cell(value))


def repeats_text(counts) -> str:
    """"1 repeat", "3 repeats" or "2-3 repeats" from the repeat counts of a panel's lines or bars."""
    low, high = int(min(counts)), int(max(counts))
    return f"{low} repeat{'s' if high > 1 else ''}" if low == high else f"{low}-{high} repeats"


def setting_words(keys: list[str], cfg) -> list[str]:
    """A configuration's words: ``key=value`` per filled key, each override on its own (no ``overrides=``)."""
    words = []
    for k, v in zip(keys, cfg):
        text = cell(v)
        words += text.split() if k == "overrides" else ([f"{k}={text}"] if text else [])
    return words


def short_plane(name: str) -> str:
    """A plane as a tick or legend shows it: ``ring control.options.spin_us=0`` -> ``ring spin_us=0``."""
    return str(name).replace("control.options.", "")


def config_groups(df: pd.DataFrame, keys: list[str], sort: bool = True) -> list[tuple[tuple, pd.DataFrame]]:
    """(tuple of ``keys``' values, rows) per configuration of ``df``, an empty cell a value; ((), df) without keys."""
    return list(df.groupby(keys, dropna=False, sort=sort)) if keys else [((), df)]


def config_labels(keys: list[str], cfgs: list) -> tuple[str, list[str]]:
    """(the words all ``cfgs`` (tuples of ``keys``' values) share, each one's own words); model_hash left out where
    it pairs one to one with model. With one configuration nothing is shared."""
    if {"model", "model_hash"} <= set(keys):
        pairs = {(c[keys.index("model")], c[keys.index("model_hash")]) for c in cfgs}
        if len(pairs) == len({m for m, _ in pairs}) == len({h for _, h in pairs}):
            cfgs = [tuple("-" if k == "model_hash" else v for k, v in zip(keys, cfg)) for cfg in cfgs]
    words = [setting_words(keys, cfg) for cfg in cfgs]
    if len(words) < 2:
        return "", [" ".join(w) for w in words]
    shared = [w for w in words[0] if all(w in other for other in words[1:])]
    return " ".join(shared), [" ".join(x for x in w if x not in shared) for w in words]


def same_words(df: pd.DataFrame) -> list[str]:
    """``key=value`` of each SAME column that holds one value in every row of ``df``."""
    return [f"{k}={cell(df[k].iloc[0])}" for k in SAME
            if k in df and df[k].nunique(dropna=False) == 1 and cell(df[k].iloc[0])]


def legend_columns(width: float, handles: list) -> int:
    """How many of ``handles``' entries fit side by side in ``width`` inches (8-pt labels)."""
    items = [0.42 + 0.066 * len(h.get_label()) for h in handles]
    if sum(items) <= width - 0.3:  # one row: each column as wide as its entry
        return len(handles)
    return max(1, min(len(handles), int((width - 0.3) / max(items))))


def header_inches(width: float, df: pd.DataFrame, shared: str, note: str, legends: list[list]) -> tuple[str, float]:
    """(the header: ``df``'s ``same_words``, ``shared``, ``note``, and ``host_cpu.busy_note`` when rows shared the
    CPUs (the figure alone must not look clean); the inches it and the ``legends`` take)."""
    same = same_words(df)
    header = "\n".join(part for part in (" ".join(same + [w for w in shared.split() if w not in same]), note,
                                          busy_note(df)) if part)
    text = "\n".join(textwrap.fill(line, width=int(width * 15)) for line in header.splitlines())
    lines = text.count("\n") + 1 if text else 0
    rows = sum(math.ceil(len(h) / legend_columns(width, h)) for h in legends if h)
    return text, 0.2 + 0.17 * lines + 0.23 * rows


def save_figure(fig, text: str, legends: list[list], out: str) -> None:
    """Put ``text`` and the ``legends`` (lists of handles) atop ``fig``, write it to ``out`` and close it."""
    import matplotlib.pyplot as plt

    width, height = fig.get_size_inches()
    y = 0.12 + 0.17 * (text.count("\n") + 1 if text else 0)
    if text:
        fig.text(0.01, 1 - 0.1 / height, text, fontsize=8, va="top")
    for handles in [h for h in legends if h]:
        ncol = legend_columns(width, handles)
        fig.legend(handles=handles, loc="upper center", ncol=ncol, fontsize=8, frameon=False, borderaxespad=0,
                   bbox_to_anchor=(0.5, 1 - y / height), handletextpad=0.4, columnspacing=1.2)
        y += 0.23 * math.ceil(len(handles) / ncol)
    tmp = f"{out}.tmp{os.getpid()}"  # drawn aside, then renamed: a stop while drawing cuts no figure, old or new
    try:
        fig.savefig(tmp, dpi=110, format=os.path.splitext(out)[1][1:].lower() or None)
        os.replace(tmp, out)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
    plt.close(fig)


def label_text(label: str, reps, width: float) -> str:
    """A row's ``label`` and its repeats (``reps``: counts per line or bar), wrapped to ``width`` inches."""
    return textwrap.fill(f"{label}  ({repeats_text(reps)})" if label else repeats_text(reps), width=int(width * 13))


def label_space(text: str) -> float:
    """Inches above a row of panels for its label ``text`` and the panels' titles."""
    return 0.42 + 0.15 * (text.count("\n") + 1)


def row_label(ax, text: str) -> None:
    """Write a row's label ``text`` (``label_text``) above its first panel ``ax`` and its title, growing upwards."""
    note = ax.annotate(text, xy=(0, 1), xycoords="axes fraction", xytext=(0, 19), textcoords="offset points",
                       fontsize=8, va="bottom", fontweight="bold", annotation_clip=False)
    note.set_in_layout(False)  # a long label must not squeeze the panels


def stack(ncols: int, rows: list[tuple[int, float, float]], top: float, col_w: float = 3.6,
          panel_h: float = 2.2):
    """A figure of ``ncols`` columns ``col_w`` inches wide, ``top`` inches of header, then ``rows`` of panels,
    each (panels, inches above, inches below); returns (figure, each row's axes). No empty panel exists."""
    import matplotlib

    matplotlib.use("Agg")  # the figures are files
    import matplotlib.pyplot as plt

    width, left, right = ncols * col_w, 0.8, 0.18  # left: 6-digit tick labels and the axis label
    height = top + sum(above + panel_h + below for _, above, below in rows) + 0.1
    fig = plt.figure(figsize=(width, height))
    axes, y = [], height - top
    for n, above, below in rows:
        y -= above + panel_h
        axes.append([fig.add_axes(((i * col_w + left) / width, y / height, (col_w - left - right) / width,
                                   panel_h / height)) for i in range(n)])
        y -= below
    return fig, axes


def side_path(out: str, suffix: str) -> str:
    """Where a second figure goes beside ``out``: out.png -> out_SUFFIX.png."""
    root, ext = os.path.splitext(out)
    return f"{root}_{suffix}{ext}"


def curves_figure(df: pd.DataFrame, rest: list[str], x_key: str, xlabel: str, panels: list, legend, draw, out: str,
                  col_w: float, panel_h: float = 2.2, blank_label: str = ""):
    """Write to ``out`` a row of ``panels`` ((metric, title)) per configuration of the ``rest`` keys, each drawn by
    ``draw(ax, rows, metric, colours, tps)`` against ``x_key``, under ``legend(planes, tps, colours)``.
    ``blank_label``: a row's label where it has no word and none is shared."""
    groups = config_groups(df, rest)
    shared, labels = config_labels(rest, [cfg for cfg, _ in groups])
    (planes, colours), tps = plane_colours(df.control), sorted(df.tp.unique())
    handles = legend(planes, tps, colours)
    width = col_w * len(panels)
    per_point = df.groupby(rest + ["control", "tp", x_key], dropna=False).size()
    note = "median over repeats, bars min-max" if per_point.max() > 1 else "one repeat per point: no spread to draw"
    header, top = header_inches(width, df, shared, note, [handles])
    texts = [label_text(label or ("" if shared else blank_label), rows.groupby(["control", "tp", x_key]).size(),
                        width) for label, (_, rows) in zip(labels, groups)]
    fig, axes = stack(len(panels), [(len(panels), label_space(t), 0.5) for t in texts], top, col_w, panel_h)
    for row, (_, rows), text in zip(axes, groups, texts):
        for ax, (metric, title) in zip(row, panels):
            draw(ax, rows, metric, colours, tps)
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=7)
            ax.set_xlabel(xlabel, fontsize=7)
            ax.set_title(ax.get_title() or title, fontsize=8)  # draw() may title a panel per section
        row_label(row[0], text)
    save_figure(fig, header, [handles], out)


def check_plot_path(path: str) -> None:
    """Raises InputError unless ``path`` is a .png/.pdf/.svg file name in a writable directory."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        top = directory  # the nearest that exists: a directory, or a file where a directory should be
        while not os.path.lexists(top):
            top = os.path.dirname(top)
        raise InputError(f"--plot: directory {directory} does not exist" if os.path.isdir(top)
                         else f"--plot: {top} is not a directory")
    if os.path.splitext(path)[1].lower() not in (".png", ".pdf", ".svg"):  # ".png" alone is a name, no format
        raise InputError(f"--plot: give a .png, .pdf or .svg file name, got {path!r}")
    if os.path.isdir(path):
        raise InputError(f"--plot: {path} is a directory; give a file name")
    if reason := cannot_write(directory):  # tried: root passes os.access on /proc, and the write fails there
        raise InputError(f"--plot: cannot write {path}: {reason}")
