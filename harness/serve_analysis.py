"""workload=serve rows in ``harness.analyze``: which rows they are, their columns made numeric, their table."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .text_tables import header_lines, key_cells, markdown, number, section_lines, sections, spread_cell, widest_fitting

# workload=serve rows' table: (column, header); good/s where an SLO was set, else done/s (completed)
SERVE_METRICS = [("achieved_rate_req_s", "sent/s"), ("goodput_req_s", "good/s"), ("req_s", "done/s"),
                 ("ttft_ms_p50", "ttft50"), ("ttft_ms_p99", "ttft99"), ("tpot_ms_p50", "tpot50"),
                 ("tpot_ms_p99", "tpot99"), ("queue_ms_p99", "queue")]
SERVE_NUMERIC = ["request_rate", "burstiness", "max_concurrency", "achieved_rate_req_s", "goodput_req_s",
                 "ttft_ms_p50", "queue_ms_p99"]
# a serve setting has its own column: out of ``overrides``, so rate 16 by default or typed is one configuration
SERVE_OVERRIDE = re.compile(r"workload\.(cpu\.)?(request_rate|burstiness|max_concurrency|slo)[.=]")


def is_serve(df: pd.DataFrame) -> pd.Series:
    """Which rows are workload=serve runs (a request rate, or the workload so named)."""
    return df.request_rate.notna() | (df.workload == "serve")


def prepare_serve(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the serve columns numeric (request_rate keeps ``inf``; infinite metrics become empty,
    damaged cells too), max_concurrency an integer, and the serve settings out of serve rows' ``overrides``."""
    df = df.copy()
    for col in SERVE_NUMERIC:
        values = pd.to_numeric(df[col], errors="coerce")
        df[col] = values if col == "request_rate" else values.replace([np.inf, -np.inf], np.nan)
    df["max_concurrency"] = df.max_concurrency.round().astype("Int64")
    df["overrides"] = [(" ".join(i for i in t.split() if not SERVE_OVERRIDE.match(i)) or None)
                       if serve and isinstance(t, str) else t for t, serve in zip(df.overrides, is_serve(df))]
    return df


ROW_KEYS = ["tp", "control", "request_rate", "max_concurrency", "burstiness"]  # the load: columns, not sections


def print_serve_table(table: pd.DataFrame, keys: list[str]) -> None:
    """Print ``summary()``'s table of workload=serve rows in at most 120 columns: rows by the ROW_KEYS, a section
    per value of the other keys, the SERVE_METRICS' ``spread_cell`` (the last left out where they would not fit)."""
    shown = [(m, h) for m, h in SERVE_METRICS if f"{m}_median" in table.columns]
    goodput = any(m == "goodput_req_s" for m, _ in shown)
    if goodput:
        shown = [(m, h) for m, h in shown if m != "req_s"]
    row_keys = [k for k in keys if k in ROW_KEYS]
    parts = sections(table, [k for k in keys if k not in ROW_KEYS])

    def render(cols):
        return section_lines([(label, markdown([{**{"rate" if k == "request_rate" else k: v
                                                    for k, v in key_cells(r, row_keys).items()},
                                                 **{h: spread_cell(r, m, number) for m, h in cols}}
                                                for _, r in rows.iterrows()])) for label, rows in parts])

    lines, left_out = widest_fitting(render, shown)
    legend = ("workload=serve rows: median over ok repeats ±half the repeats' range in % of it; rate = "
              "request_rate (req/s, set); sent/s = achieved_rate_req_s (empty at rate inf: all sent at once), "
              + ("good/s = goodput_req_s" if goodput else "done/s = req_s (completed)")
              + " (req/s); ttft50/99 = ttft_ms_p50/p99, tpot50/99 = tpot_ms_p50/p99, queue = queue_ms_p99 (ms)")
    if left_out:
        legend += f"; left out to fit: {', '.join(h for _, h in left_out)} (all: --format markdown)"
    if "control" in table.columns and (table["control"] == "ideal").any():
        lines.append("ideal under arrivals: its batches are the recording's, so compare planes on decode step and "
                     "TPOT;\nits TTFT, queueing and E2EL follow the recording's admissions and are no floor "
                     "(docs/SERVE.md)")
    print("\n".join(header_lines(legend) + lines))
