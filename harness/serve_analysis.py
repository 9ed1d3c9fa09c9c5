"""workload=serve rows in ``harness.analyze``: which rows they are, their columns made numeric, and their
table (one row per configuration and request rate, ~110 characters wide); the figure is ``plots.plot_load``."""

from __future__ import annotations

import re
import textwrap

import numpy as np
import pandas as pd

from .exposed import key_cell

# workload=serve rows' table: (column, header); good/s where an SLO was set, else done/s (completed)
SERVE_METRICS = [("achieved_rate_req_s", "sent/s"), ("goodput_req_s", "good/s"), ("req_s", "done/s"),
                 ("ttft_ms_p50", "ttft50"), ("ttft_ms_p99", "ttft99"), ("tpot_ms_p50", "tpot50"),
                 ("tpot_ms_p99", "tpot99"), ("queue_ms_p99", "queue")]
SERVE_NUMERIC = ["request_rate", "burstiness", "max_concurrency", "achieved_rate_req_s", "goodput_req_s",
                 "ttft_ms_p50", "queue_ms_p99"]
# an override of a serve setting is in its own column: dropped from ``overrides`` (rate 16 by default or typed
# is one configuration, and a rate sweep is not also an overrides sweep)
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


def key_cells(r: pd.Series, keys: list[str]) -> dict:
    """A table row's configuration cells (a float key as 4, 0.5, inf) and ``n``: ok repeats (+ failed)."""
    row = {k: key_cell(r[k]) for k in keys}
    row["n"] = f"{int(r['repeats'])} (+{int(r['failed'])} failed)" if r["failed"] else int(r["repeats"])
    return row


def number(value: float) -> str:
    """At most 5 characters: 0.521, 31.8, 344, 1570, 15.7k."""
    if abs(value) >= 9999.5:
        return f"{value / 1e3:.3g}k"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def print_serve_table(table: pd.DataFrame, keys: list[str]) -> None:
    """Print ``summary()``'s table of workload=serve rows, at most 120 characters wide keyed by tp, control and
    rate (request_rate): per metric of SERVE_METRICS its median and +-half its range over the repeats in % of
    the median (cells of 9 characters at most, but for spreads of 100% and more); good/s where an SLO was set,
    else done/s."""
    shown = [(m, h) for m, h in SERVE_METRICS if f"{m}_median" in table.columns]
    if any(m == "goodput_req_s" for m, _ in shown):
        shown = [(m, h) for m, h in shown if m != "req_s"]
    rows = []
    for _, r in table.iterrows():
        row = {"rate" if k == "request_rate" else k: v for k, v in key_cells(r, keys).items()}
        for m, header in shown:
            med, low, high = r[f"{m}_median"], r[f"{m}_min"], r[f"{m}_max"]
            cell = "" if pd.isna(med) else number(med)
            if cell and r[f"{m}_count"] > 1 and med:
                cell += f"±{50 * (high - low) / abs(med):.0f}%"
            row[header] = cell
        rows.append(row)
    legend = ("workload=serve rows: median over ok repeats ±half the repeats' range in % of it; rate = "
              "request_rate (req/s, set); sent/s = "
              "achieved_rate_req_s (empty at rate inf: all sent at once), done/s = req_s (completed), good/s = "
              "goodput_req_s (req/s); ttft50/99 = ttft_ms_p50/p99, tpot50/99 = tpot_ms_p50/p99, queue = "
              "queue_ms_p99 (ms)")
    print("\n" + textwrap.fill(legend, width=110))
    print(pd.DataFrame(rows).to_markdown(index=False))
