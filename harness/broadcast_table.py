"""The text tables of ``workload=broadcast`` rows: a row per (tp, payload) by size, a column per plane."""

from __future__ import annotations

import pandas as pd

from .plot_common import plane_order
from .text_tables import header_lines, markdown, number, section_lines, sections, widest_fitting

METRICS = ["ctrl_oneway_us_p50", "ctrl_oneway_us_p99", "payload_bytes"]


def is_broadcast_only(df: pd.DataFrame) -> bool:
    return "workload" in df and (df.workload == "broadcast").all()


def size(n: float) -> str:
    """Bytes as 89 B, 16.4 kB, 1.05 MB."""
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def print_broadcast_table(table: pd.DataFrame, keys: list[str]) -> None:
    """``summary()``'s table of broadcast rows (``METRICS``) as two tables, one-way p50 then p99 (us), each in at
    most 120 columns (the last planes left out where they would not fit), a section per value of the other keys."""
    planes = plane_order(table.control)
    parts = sections(table, [k for k in keys if k not in ("control", "tp", "payload")])

    def render(metric: str, shown: list) -> list[str]:
        out = []
        for label, rows in parts:
            lines = []
            for (tp, payload), by in rows.groupby(["tp", "payload"], sort=False):
                at = by.set_index("control")[f"{metric}_median"]
                nbytes = by.payload_bytes_median.dropna()
                lines.append({"tp": tp, "payload": payload, "size": size(nbytes.iloc[0]) if len(nbytes) else "",
                              **{p: number(at[p]) if p in at.index and pd.notna(at[p]) else "" for p in shown}})
            out.append((label, markdown(lines)))
        return section_lines(out)

    repeats = sorted(set(table.repeats))
    n = repeats[0] if len(repeats) == 1 else f"{repeats[0]}-{repeats[-1]}"
    for metric, name in (("ctrl_oneway_us_p50", "p50"), ("ctrl_oneway_us_p99", "p99")):
        lines, left_out = widest_fitting(lambda shown, m=metric: render(m, shown), planes)
        text = (f"workload=broadcast: one-way latency {name} (us) per plane, median over ok repeats (n={n}); "
                "size = payload_bytes")
        if left_out:
            text += f"; left out to fit: {', '.join(left_out)} (all: --format markdown)"
        print("\n".join(header_lines(text) + lines))
