"""``harness.analyze``'s summary table: per configuration each metric's median over ok repeats, its spread and
its ratio to a baseline plane at the same other keys, in each ``--format`` (text: the COMPACT metrics)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .text_tables import (
    common_overrides,
    header_lines,
    key_cells,
    markdown,
    num4,
    ratio,
    section_lines,
    sections,
    spread_cell,
    widest_fitting,
)

KEY_METRICS = ["output_tok_s", "req_s", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99", "itl_ms_p99", "e2el_ms_p99",
               "decode_step_ms_p50", "ctrl_oneway_us_p50", "ctrl_oneway_us_p99", "ctrl_launch_lag_us_mean",
               "ctrl_launch_lag_us_p50", "ctrl_launch_late_us_mean"]
FULL_METRICS = KEY_METRICS + ["total_tok_s", "decode_step_ms_p99", "ctrl_bytes_mean", "ctrl_calls"]
COMPACT = [("output_tok_s", "tok/s"), ("tpot_ms_p50", "TPOT p50 ms"), ("decode_step_ms_p50", "step p50 ms"),
           ("ctrl_oneway_us_p50", "1-way p50 us"), ("ctrl_oneway_us_p99", "1-way p99 us")]
ROW_KEYS = ["tp", "control"]
# can be negative or near 0: a ratio to the baseline would mean nothing
SIGNED = {"ctrl_launch_lag_us_mean", "ctrl_launch_lag_us_p50", "ctrl_launch_late_us_mean"}


def default_baseline(df: pd.DataFrame) -> str | None:
    """The plane ratios are to: ideal where the ok rows have it, else shm, else the first plane in order."""
    ok = df[df.status == "ok"]
    planes = sorted(map(str, set((ok if len(ok) else df).control.dropna())))
    return next((p for p in ("ideal", "shm") if p in planes), planes[0] if planes else None)


def summary(df: pd.DataFrame, keys: list[str], baseline: str | None, metrics: list[str] = KEY_METRICS) -> pd.DataFrame:
    """Per configuration (``df``: key cells filled): median, min, max and count over the ok repeats of each of
    ``metrics``, ok and failed rows, the median's ratio to the baseline control's at the same other keys."""
    ok = df[df.status == "ok"]
    metrics = [m for m in metrics if ok[m].notna().any()]
    g = ok.groupby(keys)[metrics]
    out = pd.concat([g.agg(stat).add_suffix(f"_{stat}") for stat in ("median", "min", "max", "count")], axis=1)
    counts = df.groupby(keys).status.agg(repeats=lambda s: int((s == "ok").sum()),
                                         failed=lambda s: int((s != "ok").sum()))
    out = counts.join(out, how="left").reset_index()
    if "payload" in keys and "payload_bytes" in df.columns:  # payloads by size, not as text (decode-64 < -256)
        size = pd.to_numeric(df.payload_bytes, errors="coerce").groupby(df.payload).median()
        out = out.sort_values(keys, kind="stable", key=lambda c: c.map(size) if c.name == "payload" else c)
        out = out.reset_index(drop=True)
    if baseline and "control" in keys and out.control.nunique() > 1:  # one plane alone: nothing to compare
        others = [k for k in keys if k != "control"]
        base = out[out.control == baseline]
        for m in [m for m in metrics if m not in SIGNED] if len(base) else []:
            col = f"{m}_median"
            if others:
                ref = out[others].merge(base[others + [col]], on=others, how="left")[col].to_numpy(dtype=float)
            else:
                ref = float(base[col].iloc[0])
            with np.errstate(divide="ignore", invalid="ignore"):  # a zero baseline (ideal's one-way): no ratio
                value = out[col].to_numpy(dtype=float) / ref
            out[f"{m}_vs_{baseline}"] = np.where(np.isfinite(value), value, np.nan)
    return out


def has_ratios(table: pd.DataFrame, keys: list[str], baseline: str | None) -> bool:
    """Whether any ratio to ``baseline`` was computed; if not (but one was asked for) print why."""
    cols = [c for c in table.columns if c.endswith(f"_vs_{baseline}")]
    if not baseline or (cols and table[cols].notna().any().any()):
        return bool(baseline)
    if "control" in table.columns and table.control.nunique() <= 1:
        return False
    base = table[table.control == baseline] if "control" in keys else table.iloc[:0]
    print(f"(no ratios: every control={baseline} row failed)" if len(base) and not base.repeats.any() else
          f"(no ratios: control={baseline} is not in the data, or control is not a grouping column)")
    return False


def full_cell(r: pd.Series, m: str, baseline: str | None) -> str:
    """median [min-max] (of count) (ratio): the markdown table's cell."""
    if pd.isna(r[m + "_median"]):
        return ""
    cell, count = num4(r[m + "_median"]), int(r[m + "_count"])
    if count > 1:
        sep = "-" if r[m + "_min"] >= 0 else " .. "  # "[-3--2]" would misread
        cell += f" [{num4(r[m + '_min'])}{sep}{num4(r[m + '_max'])}]"
    if count < r["repeats"]:  # some ok rows lack this metric: say of how many it is the median
        cell += f" (of {count})"
    value = r.get(f"{m}_vs_{baseline}", np.nan)
    return cell + (f" ({value:.2f}x)" if baseline and pd.notna(value) else "")


def compact_cell(r: pd.Series, m: str, baseline: str | None) -> str:
    """``spread_cell``, * when of fewer rows than n, ratio: "178.2±3% 0.99x"."""
    cell = spread_cell(r, m)
    if not cell:
        return ""
    if r[m + "_count"] < r["repeats"]:
        cell += "*"
    value = r.get(f"{m}_vs_{baseline}", np.nan)
    return cell + (f" {ratio(value)}" if baseline and pd.notna(value) else "")


def print_full(table: pd.DataFrame, keys: list[str], baseline: str | None) -> None:
    """``summary()``'s table as markdown, every key and metric: median [min-max] (ratio to ``baseline``)."""
    metrics = [c[:-7] for c in table.columns if c.endswith("_median")]
    rows = [{**key_cells(r, keys), **{m: full_cell(r, m, baseline) for m in metrics}} for _, r in table.iterrows()]
    shown = has_ratios(table, keys, baseline)
    print(f"median [min-max over ok repeats] (ratios to control={baseline})" if shown else
          "median [min-max over ok repeats]")
    print(pd.DataFrame(rows).to_markdown(index=False))


def print_compact(table: pd.DataFrame, keys: list[str], baseline: str | None) -> None:
    """``summary()``'s table in at most 120 columns: tp, control, n and the COMPACT metrics (the last left out
    where they would not fit), a section per value of the other keys."""
    shown = has_ratios(table, keys, baseline)
    row_keys = [k for k in keys if k in ROW_KEYS]
    parts = sections(table, [k for k in keys if k not in ROW_KEYS])
    metrics = [(m, h) for m, h in COMPACT if f"{m}_median" in table.columns]

    def render(cols):  # in each section the metrics its rows have
        return section_lines([(label, markdown([{**key_cells(r, row_keys),
                                                 **{h: compact_cell(r, m, baseline if shown else None)
                                                    for m, h in cols if rows[f"{m}_median"].notna().any()}}
                                                for _, r in rows.iterrows()]))
                              for label, rows in parts])

    lines, left_out = widest_fitting(render, metrics)
    common = common_overrides(table.overrides) if "overrides" in keys and len(parts) > 1 else set()
    text = "median over ok repeats ±half their range in % of it" + (
        f"; ratios to control={baseline} at the same configuration" if shown else "")
    if left_out:
        text += f"; left out to fit: {', '.join(h for _, h in left_out)} (all: --format markdown)"
    print("\n".join(header_lines(text, common) + lines))
    if any(((table[f"{m}_count"] < table.repeats) & table[f"{m}_median"].notna()).any() for m, _ in metrics):
        print("* the median of fewer rows than n: the other ok rows lack the metric")


def csv_rows(table: pd.DataFrame, keys: list[str], baseline: str | None, kind: str) -> pd.DataFrame:
    """``summary()``'s table for ``--format csv``: ``table`` (``kind``), ``n``, ``failed``, ``baseline``; no "-" key."""
    out = table.rename(columns={"repeats": "n"}).astype({"n": "Int64", "failed": "Int64"})
    out[keys] = out[keys].replace("-", "")
    out.insert(0, "table", kind)
    out.insert(len(keys) + 3, "baseline", baseline if baseline and "control" in keys else "")
    return out
