"""``harness.analyze``'s summary table: per configuration each metric's median over ok repeats, its spread and
its ratio to a baseline plane at the same other keys, in each ``--format``."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .compare import IDEAL_FOLLOWS_RECORDING
from .plot_common import plane_order
from .text_tables import fitting_sections, header_lines, key_cells, num4, number, ratio, spread_cell

KEY_METRICS = ["output_tok_s", "req_s", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99", "itl_ms_p99", "e2el_ms_p99",
               "decode_step_ms_p50", "ctrl_oneway_us_p50", "ctrl_oneway_us_p99", "ctrl_launch_lag_us_mean",
               "ctrl_launch_lag_us_p50", "ctrl_launch_late_us_mean"]
FULL_METRICS = KEY_METRICS + ["total_tok_s", "decode_step_ms_p99", "ctrl_bytes_mean", "ctrl_calls"] + [
    "ttft_ms_mean", "ttft_ms_p50", "tpot_ms_mean", "itl_ms_mean", "itl_ms_p50", "e2el_ms_mean", "e2el_ms_p50"]
COMPACT = [("output_tok_s", "tok/s"), ("tpot_ms_p50", "TPOT p50 ms"), ("decode_step_ms_p50", "step p50 ms"),
           ("ctrl_oneway_us_p50", "1-way p50 us"), ("ctrl_oneway_us_p99", "1-way p99 us")]
# workload=serve rows' table: (column, header); good/s where an SLO was set, else done/s (completed)
SERVE_METRICS = [("achieved_rate_req_s", "sent/s"), ("goodput_req_s", "good/s"), ("req_s", "done/s"),
                 ("ttft_ms_p50", "ttft50"), ("ttft_ms_p99", "ttft99"), ("tpot_ms_p50", "tpot50"),
                 ("tpot_ms_p99", "tpot99"), ("queue_ms_p99", "queue")]
# what a narrow serve table leaves out first: the queue, the sent rate, the p99s; the medians last
SERVE_DROP = [(m, h) for first in ("queue_ms_p99", "achieved_rate_req_s", "tpot_ms_p99", "ttft_ms_p99")
              for m, h in SERVE_METRICS if m == first]
SERVE_FULL_METRICS = list(dict.fromkeys([m for m, _ in SERVE_METRICS] + FULL_METRICS))  # markdown and csv
BROADCAST_METRICS = ["ctrl_oneway_us_p50", "ctrl_oneway_us_p99", "payload_bytes"]
ROW_KEYS = ["tp", "control"]  # a table's rows; the other keys make its sections
SERVE_ROW_KEYS = ROW_KEYS + ["request_rate", "max_concurrency", "burstiness"]  # the load: columns, not sections
SHORT = {"request_rate": "rate", "max_concurrency": "conc", "burstiness": "burst"}  # their headers
# can be negative or near 0: a ratio to the baseline would mean nothing
SIGNED = {"ctrl_launch_lag_us_mean", "ctrl_launch_lag_us_p50", "ctrl_launch_late_us_mean"}


def default_baseline(df: pd.DataFrame) -> str | None:
    """The plane ratios are to: ideal where the ok rows have it, else shm, else the first plane in order."""
    ok = df[df.status == "ok"]
    planes = sorted(map(str, set((ok if len(ok) else df).control.dropna())))
    return next((p for p in ("ideal", "shm") if p in planes), planes[0] if planes else None)


def summary(df: pd.DataFrame, keys: list[str], baseline: str | None, metrics: list[str] = KEY_METRICS) -> pd.DataFrame:
    """Per configuration (key cells filled): each of ``metrics``' median, min, max and count over ok repeats, the
    ok, failed and stalled rows, the median's ratio to the ``baseline`` control's at the same other keys."""
    ok = df[df.status == "ok"]
    metrics = [m for m in metrics if ok[m].notna().any()]
    g = ok.groupby(keys)[metrics]
    out = pd.concat([g.agg(stat).add_suffix(f"_{stat}") for stat in ("median", "min", "max", "count")], axis=1)
    counts = df.assign(repeats=df.status == "ok", failed=~df.status.isin(["ok", "stalled"]),
                       stalled=df.status == "stalled").groupby(keys)[["repeats", "failed", "stalled"]].sum()
    out = counts.join(out, how="left").reset_index()
    if "payload" in keys:  # payloads by size, not as text (decode-64 < -256)
        size = pd.to_numeric(df.payload_bytes, errors="coerce").groupby(df.payload).median()
        out = out.sort_values(keys, kind="stable", key=lambda c: c.map(size) if c.name == "payload" else c,
                              ignore_index=True)
    # one plane alone: nothing to compare
    if baseline and "control" in keys and out.control.nunique() > 1 and (out.control == baseline).any():
        others = [k for k in keys if k != "control"]
        cols = [f"{m}_median" for m in metrics if m not in SIGNED]
        base = out.loc[out.control == baseline, others + cols]
        ref = out[others].merge(base, on=others, how="left") if others else base.iloc[[0] * len(out)]
        value = out[cols].astype(float) / ref[cols].to_numpy(dtype=float)  # a zero baseline (ideal's one-way): inf
        if others:  # the baseline alone in its configuration: no 1.00x to itself
            value.loc[out.groupby(others, dropna=False).control.transform("size").eq(1).to_numpy()] = np.nan
        value.loc[at_tp_1(out).to_numpy()] = np.nan  # no plane sends: a ratio there is run-to-run spread
        out[[f"{c[:-7]}_vs_{baseline}" for c in cols]] = value.replace([np.inf, -np.inf], np.nan).to_numpy()
    return out


def at_tp_1(table: pd.DataFrame) -> pd.Series:
    """Which of ``table``'s rows are at tp=1 (none when tp is not one of its columns)."""
    return pd.to_numeric(table.tp, errors="coerce").eq(1) if "tp" in table else pd.Series(False, index=table.index)


TP_1 = "no plane sends there, so the planes differ only by run-to-run noise"


def ratios_note(table: pd.DataFrame, baseline: str, where: str = "") -> str:
    """``ratios to control=ideal`` + ``where``, and why the tp=1 rows have none where the table has some."""
    return f"ratios to control={baseline}{where}" + ", none at tp=1 (no plane sends there)" * bool(at_tp_1(table).any())


def has_ratios(table: pd.DataFrame, keys: list[str], baseline: str | None) -> bool:
    """Whether any ratio to ``baseline`` was computed; if not (but one was asked for) print why."""
    cols = [c for c in table.columns if c.endswith(f"_vs_{baseline}")]
    if not baseline or (cols and table[cols].notna().any().any()):
        return bool(baseline)
    if "control" not in keys:
        print(f"(no ratios to control={baseline}: control is not a grouping column)")
    elif table.control.nunique() > 1:  # one plane alone: nothing to compare, nothing to say
        rest = table[~at_tp_1(table)]
        if rest.control.nunique() < 2:
            print(f"(no ratios at tp=1: {TP_1})")
        else:
            print(f"(no ratios: {why_none(rest, cols, baseline)}"
                  + ("; none at tp=1 either, where no plane sends)" if len(rest) < len(table) else ")"))
    return False


def why_none(table: pd.DataFrame, cols: list[str], baseline: str) -> str:
    """Why ``table`` (of several planes) holds no ratio to ``baseline``."""
    base = table[table.control == baseline]
    held = base[[c[:-len(f"_vs_{baseline}")] + "_median" for c in cols]].notna().any().any()
    return (f"every control={baseline} row failed" if len(base) and not base.repeats.any() else
            f"control={baseline} is not in the data" if not len(base) else
            f"control={baseline}'s rows hold no metric" if not held else
            f"no configuration has control={baseline} beside another plane")


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
    return cell + (f" ({ratio(value)})" if baseline and pd.notna(value) else "")


def compact_cell(r: pd.Series, m: str, baseline: str | None) -> str:
    """``spread_cell``, * when of fewer rows than n, ratio: "178.2±3% 0.99x"."""
    if not (cell := spread_cell(r, m)):
        return ""
    value = r.get(f"{m}_vs_{baseline}", np.nan)
    star = "*" if r[m + "_count"] < r["repeats"] else ""
    return cell + star + (f" {ratio(value)}" if baseline and pd.notna(value) else "")


def print_full(table: pd.DataFrame, keys: list[str], baseline: str | None) -> None:
    """``summary()``'s table as markdown, every key and metric: median [min-max] (ratio to ``baseline``)."""
    metrics = [c[:-7] for c in table.columns if c.endswith("_median")]
    rows = [{**key_cells(r, keys), **{m: full_cell(r, m, baseline) for m in metrics}} for _, r in table.iterrows()]
    ratios = f" ({ratios_note(table, baseline)})" if has_ratios(table, keys, baseline) else ""
    print(f"median [min-max over ok repeats]{ratios}")
    print(pd.DataFrame(rows).to_markdown(index=False))


def print_table(kind: str, rows: pd.DataFrame, keys: list[str], baseline: str | None, fmt: str) -> None:
    """One ``kind`` of rows' (engine, broadcast, serve; key cells filled) summary table in ``fmt``: text or markdown."""
    if kind == "serve" and fmt == "text":
        print_serve_table(summary(rows, keys, None, [m for m, _ in SERVE_METRICS]), keys)
    elif kind == "broadcast" and fmt == "text" and {"control", "tp", "payload"} <= set(keys):
        print_broadcast_table(summary(rows, keys, None, BROADCAST_METRICS), keys)
    else:
        metrics = SERVE_FULL_METRICS if kind == "serve" else FULL_METRICS
        table = summary(rows, keys, baseline, metrics)
        (print_compact if fmt == "text" else print_full)(table, keys, baseline)
        follows = ", ".join(sorted(IDEAL_FOLLOWS_RECORDING & set(metrics)))  # the text table's parentheses, said
        for line in ideal_note(table, f"its {follows} cells") if kind == "serve" else ():  # (markdown said nothing)
            print(line)


def csv_rows(kind: str, rows: pd.DataFrame, keys: list[str], baseline: str | None) -> pd.DataFrame:
    """One ``kind`` of rows' ``summary()`` for ``--format csv``: ``table``, ``n``, ``failed``, ``stalled``, ``baseline``
    and the metrics."""
    table = summary(rows, keys, baseline, SERVE_FULL_METRICS if kind == "serve" else FULL_METRICS)
    out = table.rename(columns={"repeats": "n"}).astype(dict.fromkeys(["n", "failed", "stalled"], "Int64")).copy()
    out[keys] = out[keys].replace("-", "")
    out.insert(0, "table", "serve" if kind == "serve" else "summary")
    out.insert(len(keys) + 4, "baseline", baseline if baseline and "control" in keys else "")
    return out


def print_compact(table: pd.DataFrame, keys: list[str], baseline: str | None) -> None:
    """``summary()``'s table in at most 120 columns: tp, control, n, the COMPACT metrics that fit; sections."""
    shown = has_ratios(table, keys, baseline)
    row_keys = [k for k in keys if k in ROW_KEYS]
    metrics = [(m, h) for m, h in COMPACT if f"{m}_median" in table.columns]

    def row(r, rows, cols):  # in each section the metrics its rows have
        return {**key_cells(r, row_keys), **{h: compact_cell(r, m, baseline if shown else None)
                                             for m, h in cols if rows[f"{m}_median"].notna().any()}}

    lines, left_out, common = fitting_sections(table, [k for k in keys if k not in ROW_KEYS], row, metrics)
    text = "median over ok repeats ±half their range in % of it; n = ok repeats" + (
        f"; {ratios_note(table, baseline, ' at the same configuration')}" if shown else "")
    print("\n".join(header_lines(text, common, [h for _, h in left_out]) + lines))
    if any(((table[f"{m}_count"] < table.repeats) & table[f"{m}_median"].notna()).any() for m, _ in metrics):
        print("* the median of fewer rows than n: the other ok rows lack the metric")


def print_serve_table(table: pd.DataFrame, keys: list[str]) -> None:
    """``summary()``'s table of workload=serve rows in at most 120 columns: the SERVE_METRICS that fit; sections."""
    goodput = "goodput_req_s_median" in table.columns  # then good/s, not done/s, in the sections with an SLO
    shown = [(m, h) for m, h in SERVE_METRICS if f"{m}_median" in table.columns]
    row_keys = [k for k in keys if k in SERVE_ROW_KEYS]

    def cell(r, m):  # ideal's cells that follow its recording's admissions, in parentheses (tp=1 replays none)
        text = spread_cell(r, m, number)
        replayed = r.get("control") == "ideal" and r.get("tp") != 1
        return f"({text})" if text and m in IDEAL_FOLLOWS_RECORDING and replayed else text

    def row(r, rows, cols):
        skip = "req_s" if goodput and rows.goodput_req_s_median.notna().any() else "goodput_req_s"
        return {**{SHORT.get(k, k): v for k, v in key_cells(r, row_keys).items()},
                **{h: cell(r, m) for m, h in cols if m != skip}}

    lines, left_out, common = fitting_sections(table, [k for k in keys if k not in SERVE_ROW_KEYS], row, shown,
                                               drop=SERVE_DROP)
    shorts = "".join(f", {SHORT[k]} = {k}" for k in row_keys if k in SHORT and k != "request_rate")
    legend = ("workload=serve rows: median over ok repeats ±half the repeats' range in % of it; n = ok repeats (not "
              "requests); rate = "
              f"request_rate (req/s, set){shorts}; sent/s = achieved_rate_req_s (empty where all were sent at once), "
              + ("good/s = goodput_req_s, completed within the slo named above, or done/s = req_s where none was set"
                 if goodput else "done/s = req_s (completed)")
              + " (req/s); ttft50/99 = ttft_ms_p50/p99, tpot50/99 = tpot_ms_p50/p99, queue = queue_ms_p99 (ms)")
    lines += ideal_note(table, "its cells\nin parentheses (sent/s, good/s, done/s, TTFT, queue)")
    print("\n".join(header_lines(legend, common, [h for _, h in left_out]) + lines))


def ideal_note(table: pd.DataFrame, cells: str) -> list[str]:
    """The line under a serve table whose ``table`` has ideal rows at tp > 1: ``cells`` are no floor."""
    if "control" not in table.columns or not ((table["control"] == "ideal") & (table.get("tp") != 1)).any():
        return []
    return [f"ideal under arrivals: its batches are the recording's, so compare planes on decode step and TPOT; "
            f"{cells} follow the recording's admissions: no floor (docs/SERVE.md)"]


def size(n: float) -> str:
    """Bytes as 89 B, 16.4 kB, 1.05 MB."""
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def print_broadcast_table(table: pd.DataFrame, keys: list[str]) -> None:
    """``summary()``'s table of broadcast rows as two tables, one-way p50 then p99 (us), a row per (tp, payload) by
    size, a column per plane that fits in 120 columns; sections."""
    at = [k for k in keys if k not in ("control", "tp", "payload")] + ["tp", "payload"]
    medians = [f"{m}_median" for m in BROADCAST_METRICS]  # summary() leaves out a metric no ok row has: empty cells
    table = table.reindex(columns=[*table.columns.difference(medians, sort=False), *medians])
    nbytes = table.groupby(at, sort=False).payload_bytes_median.first().rename("nbytes")  # in order of appearance

    def row(r, rows, planes):
        return {"tp": r["tp"], "payload": r["payload"], "size": size(r["nbytes"]) if pd.notna(r["nbytes"]) else "",
                **{p: number(r[p]) if pd.notna(r[p]) else "" for p in planes}}

    repeats = sorted(set(table.repeats))
    n = repeats[0] if len(repeats) == 1 else f"{repeats[0]}-{repeats[-1]}"
    for metric, name in (("ctrl_oneway_us_p50", "p50"), ("ctrl_oneway_us_p99", "p99")):
        wide = nbytes.to_frame().join(table.pivot(index=at, columns="control", values=f"{metric}_median"))
        lines, left_out, common = fitting_sections(wide.reset_index(), at[:-2], row, plane_order(table.control))
        print("\n".join(header_lines(f"workload=broadcast: one-way latency {name} (us) per plane, median over ok "
                                     f"repeats (n={n}); size = payload_bytes", common, left_out) + lines))
