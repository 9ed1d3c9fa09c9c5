"""``harness.analyze``'s terminal tables: markdown at most WIDTH UTF-8 bytes a line (as ``awk length`` counts),
the configuration columns that are not the table's rows in a line above each section of rows, short numbers."""

from __future__ import annotations

import re
import textwrap

import pandas as pd

from .plot_common import config_groups, key_cell

WIDTH = 120
_RIGHT = re.compile(r"^\(?([-+\d.\[]|inf\)?$)")  # a column of numbers is right-aligned, "(12.5)" too


def key_cells(r: pd.Series, keys: list[str]) -> dict:
    """A table row's configuration cells (a float key as 4, 0.5, inf) and ``n``: ok repeats (+ failed, stalled)."""
    row = {k: key_cell(r[k]) for k in keys}
    other = ", ".join(f"+{int(r[s])} {s}" for s in ("failed", "stalled") if r[s])
    row["n"] = f"{int(r['repeats'])} ({other})" if other else int(r["repeats"])
    return row


def number(value: float) -> str:
    """At most 5 characters: 0.521, 31.8, 344, 1570, 15.7k."""
    if abs(value) >= 9999.5:
        return f"{value / 1e3:.3g}k"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def num4(value: float) -> str:
    """Four significant digits, never an exponent: 0.5213, 6.412, 178.2, 1700, 22960."""
    return f"{value:.0f}" if abs(value) >= 999.5 else f"{value:.4g}"


def ratio(value: float) -> str:
    """A ratio in at most 6 characters: <0.01x, 0.99x, 13.6x, 136x, 1360x (never a positive ratio as 0.00x)."""
    if 0 < value < 0.005:
        return "<0.01x"
    return f"{value:.2f}x" if value < 9.995 else (f"{value:.3g}x" if value < 999.5 else f"{value:.0f}x")


def spread_cell(r: pd.Series, m: str, fmt=num4) -> str:
    """``fmt`` of ``m``'s median ±half the repeats' range in % of it: "178.2±3%"; "" without one."""
    med = r[f"{m}_median"]
    if pd.isna(med):
        return ""
    spread = f"±{50 * (r[f'{m}_max'] - r[f'{m}_min']) / abs(med):.0f}%" if r[f"{m}_count"] > 1 and med else ""
    return fmt(med) + spread


def markdown(rows: list[dict]) -> list[str]:
    """The rows as a markdown table's lines, cells as given (signs stay), columns of numbers right-aligned."""
    df = pd.DataFrame(rows).fillna("").astype(str)
    align = ["right" if (df[c] != "").any() and df[c][df[c] != ""].str.match(_RIGHT).all() else "left"
             for c in df.columns]
    return df.to_markdown(index=False, disable_numparse=True, colalign=align).splitlines()


def fitting_sections(table: pd.DataFrame, section_keys: list[str], row, columns: list, keep: int = 1,
                     drop: list | None = None):
    """``table`` as ``markdown`` tables of ``row(r, rows, shown)`` per row ``r``, a section (``section_label``
    above it) per value of ``section_keys`` in order of appearance, ``shown`` the most of ``columns`` (at least
    ``keep``; the first of ``drop`` left out first, by default the last column) whose lines fit in WIDTH bytes
    ("±" counts 2): (the lines, the columns left out, the overrides every row has where there are several
    sections)."""
    groups = config_groups(table, section_keys, sort=False) if len(table) else []
    overrides = table.overrides if "overrides" in section_keys and len(groups) > 1 else []  # one: its label says all
    items = [set(v.split()) if isinstance(v, str) and v != "-" else set() for v in overrides]
    common = set.intersection(*items) if items else set()  # every row's overrides: said above, not in the sections
    parts = [(section_label(dict(zip(section_keys, values)), common), rows)
             for values, rows in groups] if groups else [("", table)]

    def render(shown: list) -> list[str]:  # each label wrapped, a blank line between sections
        out = []
        for label, rows in parts:
            if out:
                out.append("")
            if label:
                out += textwrap.wrap("-- " + label, WIDTH - 2, subsequent_indent="   ")
            out += markdown([row(r, rows, shown) for _, r in rows.iterrows()])
        return out

    drop = [c for c in drop or () if c in columns] + [c for c in columns[::-1] if c not in (drop or ())]
    for n in range(len(columns), min(keep, len(columns)) - 1, -1):  # at least once
        gone = drop[:len(columns) - n]
        lines = render([c for c in columns if c not in gone])
        if n <= keep or all(len(line.encode()) <= WIDTH for line in lines):
            return lines, [c for c in columns if c in gone], common


def section_label(values: dict, common: set[str] = frozenset()) -> str:
    """One section's configuration, ``key=value`` but empty ones, overrides last without the common items."""
    text = ", ".join(f"{k}={key_cell(v)}" for k, v in values.items() if k != "overrides" and v != "-")
    if "overrides" in values:
        own = [i for i in str(values["overrides"]).split() if i not in common and i != "-"]
        text += ("; " if text else "") + "overrides: " + (" ".join(own) or ("-" if values["overrides"] == "-"
                                                                            else "only every row's"))
    return text


def header_lines(text: str, common: set[str], left_out: list[str] = ()) -> list[str]:
    """A table's explanation wrapped to 110 characters, then what it says of the names of its columns
    ``left_out`` to fit, and the overrides every row has, if any."""
    note = f"; left out to fit: {', '.join(left_out)} (all: --format markdown)" if left_out else ""
    lines = textwrap.wrap(text + note, 110)
    if common:
        lines += textwrap.wrap("every row: overrides " + " ".join(sorted(common)), 110)
    return lines
