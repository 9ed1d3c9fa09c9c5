"""``python -m harness.analyze FILE.csv|DIR [...]``: tables, plots and regression checks over results CSVs.

    python -m harness.analyze results/                               # every CSV there, diverted rows included
    python -m harness.analyze runs.csv --group tp control payload    # any grouping columns
    python -m harness.analyze runs.csv --plot out.png                # one panel per workload and setting
    python -m harness.analyze serve.csv --plot load.png              # workload=serve: latency against load
    python -m harness.analyze --compare OLD.csv NEW.csv --threshold 10%   # exit 1 on a regression

Medians over repeats with their range; failed rows counted per configuration, never measured; where a
configuration also has ``control=ideal`` rows, a second table gives each plane's exposed cost (its decode
step and TPOT minus ideal's, ``harness/exposed.py``). workload=serve rows (a request rate) get a table of
their own, per rate, with the serve metrics (``harness/serve_analysis.py``), and a latency-vs-load figure.
``--compare`` is the gate of ``harness/compare.py``.

Exit codes: 0 ok, 1 a regression or a missing/failed configuration (--compare), 2 unreadable input or bad
arguments.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import pandas as pd

from .compare import HIGHER_IS_BETTER, LOWER_IS_BETTER, compare
from .exposed import exposed_cost, print_exposed
from .load_results import NUMERIC, InputError, load
from .schema import ADDED_IN, COLUMNS
from .serve_analysis import SERVE_METRICS, is_serve, key_cells, prepare_serve, print_serve_table

# the serve keys before overrides, so that the rows of a rate sweep sort by rate (4, 16, inf), not as text
CONFIG_KEYS = ["engine", "control", "tp", "launcher", "nodes", "model", "model_hash", "device", "dtype", "cpu_threads",
               "all_reduce", "gemm", "workload", "request_rate", "burstiness", "max_concurrency", "slo", "overrides",
               "payload", "seed", "tag"]
KEY_METRICS = ["output_tok_s", "req_s", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99", "itl_ms_p99", "e2el_ms_p99",
               "decode_step_ms_p50", "ctrl_oneway_us_p50", "ctrl_oneway_us_p99", "ctrl_launch_lag_us_mean",
               "ctrl_launch_lag_us_p50", "ctrl_launch_late_us_mean"]
# can be negative or near 0: a ratio to the baseline would mean nothing
SIGNED = {"ctrl_launch_lag_us_mean", "ctrl_launch_lag_us_p50", "ctrl_launch_late_us_mean"}


def group_keys(df: pd.DataFrame, group: list[str] | None) -> list[str]:
    """The columns that identify a configuration: ``group`` when given, else tp, control and every other
    configuration column whose value differs between rows. Raises InputError on an unknown column."""
    if group:
        bad = [g for g in group if g not in df.columns]
        if bad:
            raise InputError(f"unknown --group column(s): {', '.join(bad)}")
        return group
    # tp and control always; every other configuration column whose value differs between rows, so rows of
    # different workloads, payloads, models or command-line settings are never pooled.
    return ["tp", "control"] + [k for k in CONFIG_KEYS if k not in ("tp", "control")
                                and df[k].nunique(dropna=False) > 1]


def comparable_keys(old: pd.DataFrame, new: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(the configuration keys ``--compare`` matches rows on, the keys it leaves out; never ``tag``, which
    names each side's runs). A key one file cannot fill (every row of it from a schema older than the
    column: gemm before schema 8, ``schema.ADDED_IN``) is left out only where the other file holds one
    value in it on every row, so it tells no two of that file's configurations apart; otherwise it stays,
    and the rows it separates show as missing rather than pooled. A column that both schemas have stays a
    key even where one file leaves it empty (``overrides``: empty = no override, a configuration of its
    own)."""
    keys, dropped = [], []
    for k in CONFIG_KEYS:
        if k == "tag":  # labels the runs on each side (tag=baseline against tag=pr-123), not a configuration
            continue
        in_old, in_new = old[k].notna().any(), new[k].notna().any()
        if not (in_old or in_new):
            continue
        if in_old != in_new:
            filled, lacking = (old, new) if in_old else (new, old)
            predates = pd.to_numeric(lacking["schema_version"], errors="coerce").max() < ADDED_IN.get(k, 0)
            if predates and filled[k].nunique(dropna=False) == 1:
                dropped.append(k)
                continue
        keys.append(k)
    return keys, dropped


def fill_keys(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Empty key cells become "-" (a group of their own that indexes like any other)."""
    df = df.copy()
    for k in keys:
        if df[k].isna().any():
            df[k] = df[k].astype(object).where(df[k].notna(), "-")
    return df


def summary(df: pd.DataFrame, keys: list[str], baseline: str | None, metrics: list[str] = KEY_METRICS) -> pd.DataFrame:
    """Per configuration: median, min and max over the ok repeats of each of ``metrics``, the counts of ok and
    failed rows, and the median's ratio to the baseline control's at the same other keys."""
    df = fill_keys(df, keys)
    ok = df[df.status == "ok"]
    metrics = [m for m in metrics if ok[m].notna().any()]
    g = ok.groupby(keys)[metrics]
    out = g.median().add_suffix("_median").join(g.min().add_suffix("_min")).join(g.max().add_suffix("_max")) \
        .join(g.count().add_suffix("_count"))
    counts = df.groupby(keys).status.agg(repeats=lambda s: int((s == "ok").sum()),
                                         failed=lambda s: int((s != "ok").sum()))
    out = counts.join(out, how="left").reset_index()
    if baseline and "control" in keys:
        others = [k for k in keys if k != "control"]
        base = out[out.control == baseline]
        for m in [m for m in metrics if m not in SIGNED] if len(base) else []:
            col = f"{m}_median"
            if others:
                ref = out[others].merge(base[others + [col]], on=others, how="left")[col].to_numpy(dtype=float)
            else:
                ref = float(base[col].iloc[0])
            with np.errstate(divide="ignore", invalid="ignore"):  # a zero baseline (ideal's one-way): no ratio
                ratio = out[col].to_numpy(dtype=float) / ref
            out[f"{m}_vs_{baseline}"] = np.where(np.isfinite(ratio), ratio, np.nan)
    return out


def print_table(table: pd.DataFrame, keys: list[str], baseline: str | None) -> None:
    """Print ``summary()``'s table as markdown: median [min-max] per metric, and the ratio to ``baseline``."""
    metrics = [c[:-7] for c in table.columns if c.endswith("_median")]
    rows = []
    for _, r in table.iterrows():
        row = key_cells(r, keys)
        for m in metrics:
            if pd.isna(r[m + "_median"]):
                row[m] = ""
                continue
            cell = f"{r[m + '_median']:.4g}"
            count = int(r[m + "_count"])
            if count > 1:
                sep = "-" if r[m + "_min"] >= 0 else " .. "  # "[-3--2]" would misread
                cell += f" [{r[m + '_min']:.4g}{sep}{r[m + '_max']:.4g}]"
            if count < r["repeats"]:  # some ok rows lack this metric: say of how many it is the median
                cell += f" (of {count})"
            ratio = r.get(f"{m}_vs_{baseline}", np.nan)
            if baseline and pd.notna(ratio):
                cell += f" ({ratio:.2f}x)"
            row[m] = cell
        rows.append(row)
    ratio_cols = [c for c in table.columns if c.endswith(f"_vs_{baseline}")]
    has_ratio = bool(baseline) and bool(ratio_cols) and bool(table[ratio_cols].notna().any().any())
    if baseline and not has_ratio:
        base = table[table.control == baseline] if "control" in keys else table.iloc[:0]
        print(f"(no ratios: every control={baseline} row failed)" if len(base) and not base.repeats.any() else
              f"(no ratios: control={baseline} is not in the data, or control is not a grouping column)")
    print(f"median [min-max over ok repeats] (ratio to control={baseline})" if has_ratio else
          "median [min-max over ok repeats]")
    print(pd.DataFrame(rows).to_markdown(index=False))


def report(df: pd.DataFrame, group: list[str] | None, baseline: str | None) -> list[str]:
    """Print the summary table (workload=serve rows in a table of their own, ``print_serve_table``) and, where
    there are ideal rows, the exposed-cost table; returns the keys."""
    keys = group_keys(df, group)
    serve = is_serve(df)
    parts = [(rows, kind) for rows, kind in ((df[~serve], "other"), (df[serve], "serve")) if not rows.empty]
    for rows, kind in parts:  # each kind keyed by the columns that differ among its own rows
        k = keys if len(parts) == 1 else group_keys(rows, group)
        if kind == "serve":
            print_serve_table(summary(rows, k, None, [m for m, _ in SERVE_METRICS]), k)
        else:
            print_table(summary(rows, k, baseline), k, baseline)
        ok = rows[rows.status == "ok"]
        if not ok.empty:
            print_exposed(exposed_cost(fill_keys(ok, k), k))
    return keys


def print_sweep_summary(rows: list[dict], jobs: int, interrupted: bool = False) -> None:
    """The end of a sweep (``interrupted``: stopped at its ``jobs``-th job): the summary of the rows it wrote,
    and each plane's exposed cost where the sweep ran ``control=ideal`` too (then the ratios are to ideal)."""
    print(f"\n== sweep{' (interrupted)' if interrupted else ''}: {jobs} jobs, {len(rows)} ok rows ==")
    if not rows:
        return
    df = pd.DataFrame(rows).reindex(columns=COLUMNS)
    for col in NUMERIC:
        df[col] = pd.to_numeric(df[col], errors="coerce")
    df = prepare_serve(df)
    report(df, None, "ideal" if "ideal" in set(df.control) else "shm")


def plot_figures(ok: pd.DataFrame, keys: list[str], group: list[str] | None, out: str) -> None:
    """Write the figure of the ok rows to ``out``: the bars of ``plots.plot``, or for workload=serve rows the
    latency-vs-load curves of ``plots.plot_load``; with rows of both kinds the curves go to OUT_load.png.
    Raises InputError when there is no ok row or a file cannot be written."""
    from .plots import load_path, plot, plot_load

    if ok.empty:
        raise InputError(f"--plot: no ok row to plot (every row failed); {out} not written")
    serve = is_serve(ok)
    figures = [] if serve.all() else [(plot, ok[~serve], keys if not serve.any() else group_keys(ok[~serve], group),
                                       out)]
    if serve.any():
        figures.append((plot_load, ok[serve], group_keys(ok[serve], group), load_path(out) if figures else out))
    for draw, rows, k, path in figures:
        try:
            draw(fill_keys(rows, k), k, path)
        except OSError as e:
            raise InputError(f"--plot: cannot write {path}: {e.strerror or e}") from None
    if serve.any():  # plot() says where its figure went
        print(f"{'workload=serve rows: ' if len(figures) == 2 else ''}latency-vs-load plot written to "
              f"{figures[-1][3]}{f' (the other rows: {out})' if len(figures) == 2 else ''}")


def parse_threshold(text: str) -> float:
    """"10%" or "0.1" -> 0.1. Raises InputError unless it is a percentage >= 0 or a fraction in [0, 1]."""
    percent = text.endswith("%")
    try:
        value = float(text[:-1] if percent else text)
    except ValueError:
        raise InputError(f"--threshold must be a percentage like 10% or a fraction like 0.1, got {text!r}") from None
    if not np.isfinite(value) or value < 0:
        raise InputError(f"--threshold must be a finite number >= 0, got {text!r}")
    if not percent and value > 1:
        raise InputError(f"--threshold {text} is not a fraction in [0, 1]; for a percentage write {text}%")
    return value / 100 if percent else value


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one ``error:`` line and exit 2, like the rest of the harness."""

    def error(self, message: str):
        print(f"error: {message} (see python -m harness.analyze --help)", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring). Exit code 0; 1 when the gate finds a regression; 2 on bad
    input (one line)."""
    p = OneLineParser(prog="python -m harness.analyze", description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="*", help="results CSV files or directories")
    p.add_argument("--group", nargs="+", help="grouping columns (default: tp, control and every other "
                                               "configuration column that differs between rows)")
    p.add_argument("--baseline", default="shm", help="control the ratios are relative to (default shm)")
    p.add_argument("--plot", metavar="OUT.png", help="write a figure: one panel per workload and setting; "
                                                  "workload=serve rows: latency against load (OUT_load.png "
                                                  "when there are other rows too)")
    p.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="regression gate between two files")
    p.add_argument("--threshold", default="10%", help="regression threshold for --compare (default 10%%)")
    p.add_argument("--allow-missing", action="store_true", help="--compare: configurations missing or failed "
                                                                 "on a side are listed but do not fail the gate")
    p.add_argument("--metrics", nargs="+", help="--compare: only these metrics")
    args = p.parse_args(argv)
    try:
        if args.compare:
            if args.files:
                raise InputError("--compare takes exactly two files; drop the other file arguments")
            threshold = parse_threshold(args.threshold)
            bad = [m for m in args.metrics or [] if m not in HIGHER_IS_BETTER + LOWER_IS_BETTER]
            if bad:
                raise InputError(f"--metrics: {bad[0]} is not comparable; choose from "
                                 f"{', '.join(HIGHER_IS_BETTER + LOWER_IS_BETTER)}")
            old, new = prepare_serve(load([args.compare[0]])), prepare_serve(load([args.compare[1]]))
            keys, one_sided = comparable_keys(old, new)
            if one_sided:
                print(f"(not compared, filled in one file only and there one value throughout: "
                      f"{', '.join(one_sided)})")
            return compare(fill_keys(old, keys), fill_keys(new, keys), keys, threshold, args.allow_missing,
                           args.metrics)
        if not args.files:
            p.error("give at least one CSV file or directory, or --compare OLD NEW")
        if args.plot:
            directory = os.path.dirname(os.path.abspath(args.plot))
            if not os.path.isdir(directory):
                raise InputError(f"--plot: directory {directory} does not exist")
            if not args.plot.lower().endswith((".png", ".pdf", ".svg")):
                raise InputError(f"--plot: give a .png, .pdf or .svg file name, got {args.plot!r}")
            if os.path.isdir(args.plot):
                raise InputError(f"--plot: {args.plot} is a directory; give a file name")
            if not os.access(directory, os.W_OK):
                raise InputError(f"--plot: directory {directory} is not writable")
        df = prepare_serve(load(args.files))
        keys = report(df, args.group, args.baseline)
        if args.plot:
            plot_figures(df[df.status == "ok"], keys, args.group, args.plot)
        return 0
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
