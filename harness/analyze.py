"""``python -m harness.analyze FILE.csv [...]``: tables, plots and regression checks over results CSVs.

    python -m harness.analyze results/runs.csv                      # medians over repeats, by configuration
    python -m harness.analyze runs.csv --group tp control payload   # any grouping columns
    python -m harness.analyze runs.csv --plot out.png               # grouped bars with min-max error bars
    python -m harness.analyze --compare OLD.csv NEW.csv --threshold 10%   # exit 1 on a regression

Where a configuration also has ``control=ideal`` rows, a second table gives each plane's exposed cost: its
decode step and TPOT minus ideal's (``harness/exposed.py``).

Exit codes: 0 ok, 1 a regression (--compare), 2 unreadable or damaged input or bad arguments.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import pandas as pd

from .exposed import exposed_cost, print_exposed
from .schema import COLUMNS, RENAMED

CONFIG_KEYS = ["engine", "control", "tp", "model", "device", "dtype", "all_reduce", "workload", "overrides", "payload",
               "seed"]
HIGHER_IS_BETTER = ["output_tok_s", "total_tok_s", "req_s"]
LOWER_IS_BETTER = ["ttft_ms_p99", "tpot_ms_p99", "itl_ms_p99", "e2el_ms_p99", "decode_step_ms_p50",
                   "ctrl_oneway_us_p50", "ctrl_oneway_us_p99"]
KEY_METRICS = HIGHER_IS_BETTER[:1] + ["req_s"] + LOWER_IS_BETTER + ["tpot_ms_p50"]
REQUIRED = ["control", "tp", "status"]


class InputError(ValueError):
    """A results file that cannot be analysed; the message says which and why."""


def load(paths: list[str]) -> pd.DataFrame:
    """Concatenate results CSVs of any schema version (missing newer columns become empty), keeping rows
    with status ok.

    Raises:
        InputError: a missing or empty file, a truncated last line, missing required columns.
    """
    frames = []
    for path in paths:
        if os.path.isdir(path):
            raise InputError(f"{path}: is a directory, not a CSV file")
        if not os.path.isfile(path):
            raise InputError(f"{path}: no such file")
        with open(path, "rb") as f:
            data = f.read()
        if not data.strip():
            raise InputError(f"{path}: empty file")
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{path}: not a text CSV file") from None
        if not data.endswith(b"\n"):
            raise InputError(f"{path}: the last line is truncated (no newline at the end; a writer died?)")
        try:
            df = pd.read_csv(path)
        except (pd.errors.ParserError, UnicodeDecodeError) as e:
            raise InputError(f"{path}: not a readable CSV ({str(e).splitlines()[0]})") from None
        missing = [c for c in REQUIRED if c not in df.columns]
        if missing:
            raise InputError(f"{path}: missing column(s) {', '.join(missing)}; is this a results CSV?")
        df = df.rename(columns={old: new for old, new in RENAMED.items() if new not in df.columns})
        for col in COLUMNS:  # rows of an older schema: the columns it lacked are empty
            if col not in df.columns:
                df[col] = np.nan
        for col in ["tp", "tpot_ms_p50"] + HIGHER_IS_BETTER + LOWER_IS_BETTER:  # a damaged cell: empty, no crash
            df[col] = pd.to_numeric(df[col], errors="coerce")
        frames.append(df[df.status == "ok"])
        if frames[-1].empty:
            raise InputError(f"{path}: no rows with status ok")
    return pd.concat(frames, ignore_index=True)


def group_keys(df: pd.DataFrame, group: list[str] | None) -> list[str]:
    if group:
        bad = [g for g in group if g not in df.columns]
        if bad:
            raise InputError(f"unknown --group column(s): {', '.join(bad)}")
        return group
    # tp and control always; every other configuration column whose value differs between rows, so rows of
    # different workloads, payloads, models or command-line settings are never pooled.
    return ["tp", "control"] + [k for k in CONFIG_KEYS if k not in ("tp", "control")
                                and df[k].nunique(dropna=False) > 1]


def fill_keys(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Empty key cells become "-" (a group of their own that indexes like any other)."""
    df = df.copy()
    for k in keys:
        if df[k].isna().any():
            df[k] = df[k].astype(object).where(df[k].notna(), "-")
    return df


def summary(df: pd.DataFrame, keys: list[str], baseline: str | None) -> tuple[pd.DataFrame, list[str]]:
    """Per group: median, min and max over repeats of each key metric, and the median's ratio to the
    baseline control's at the same other keys."""
    metrics = [m for m in KEY_METRICS if df[m].notna().any()]
    df = fill_keys(df, keys)
    g = df.groupby(keys)[metrics]
    out = g.median().add_suffix("_median").join(g.min().add_suffix("_min")).join(g.max().add_suffix("_max"))
    out["repeats"] = g.size()
    out = out.reset_index()
    if baseline and "control" in keys:
        others = [k for k in keys if k != "control"]
        base = out[out.control == baseline]
        for m in metrics if len(base) else []:
            col = f"{m}_median"
            if others:
                ref = out[others].merge(base[others + [col]], on=others, how="left")[col].to_numpy(dtype=float)
            else:
                ref = float(base[col].iloc[0]) if len(base) else np.nan
            with np.errstate(divide="ignore", invalid="ignore"):  # a zero baseline (ideal's one-way): no ratio
                ratio = out[col].to_numpy(dtype=float) / ref
            out[f"{m}_vs_{baseline}"] = np.where(np.isfinite(ratio), ratio, np.nan)
    return out, keys


def print_table(table: pd.DataFrame, keys: list[str], baseline: str | None) -> None:
    metrics = [c[:-7] for c in table.columns if c.endswith("_median")]
    rows = []
    for _, r in table.iterrows():
        row = {k: r[k] for k in keys}
        row["n"] = int(r["repeats"])
        for m in metrics:
            if pd.isna(r[m + "_median"]):
                row[m] = ""
                continue
            cell = f"{r[m + '_median']:.4g}"
            if r["repeats"] > 1:
                cell += f" [{r[m + '_min']:.4g}-{r[m + '_max']:.4g}]"
            ratio = r.get(f"{m}_vs_{baseline}", np.nan)
            if baseline and pd.notna(ratio):
                cell += f" ({ratio:.2f}x)"
            row[m] = cell
        rows.append(row)
    has_ratio = bool(baseline) and any(c.endswith(f"_vs_{baseline}") for c in table.columns)
    if baseline and not has_ratio:
        print(f"(no ratios: control={baseline} is not in the data, or control is not a grouping column)")
    print(f"median [min-max within each group] (ratio to control={baseline})" if has_ratio else
          "median [min-max within each group]")
    print(pd.DataFrame(rows).to_markdown(index=False))


def compare(old: pd.DataFrame, new: pd.DataFrame, threshold: float) -> int:
    """Match configurations, print each change; 1 when a throughput fell or a latency rose by more than
    ``threshold`` (a fraction) and by more than the measured spread (max-min over repeats, relative, of
    either side), else 0."""
    keys = [k for k in CONFIG_KEYS if old[k].notna().any() or new[k].notna().any()]
    metrics = [m for m in HIGHER_IS_BETTER + LOWER_IS_BETTER if old[m].notna().any() and new[m].notna().any()]
    o, n = (fill_keys(d, keys).groupby(keys)[metrics] for d in (old, new))
    om, nm = o.median(), n.median()
    ospread = (o.max() - o.min()) / om.abs()
    nspread = (n.max() - n.min()) / nm.abs()
    common = om.index.intersection(nm.index)
    if common.empty:
        raise InputError("no configuration appears in both files")
    worse = 0
    for idx in common:
        label = ", ".join(f"{k}={v}" for k, v in zip(keys, idx if isinstance(idx, tuple) else (idx,)) if v != "-")
        for m in metrics:
            a, b = om.at[idx, m], nm.at[idx, m]
            if pd.isna(a) or pd.isna(b) or a == 0:
                continue
            change = (b - a) / abs(a)
            bad_direction = change < 0 if m in HIGHER_IS_BETTER else change > 0
            noise = max(ospread.at[idx, m], nspread.at[idx, m], 0)
            if abs(change) > threshold and abs(change) > noise:
                verdict = "WORSE" if bad_direction else "better"
                worse += bad_direction
                print(f"{verdict:6} {label}: {m} {a:.4g} -> {b:.4g} ({change:+.1%}, spread {noise:.1%})")
    print(f"{len(common)} configuration(s) compared, {worse} regression(s) beyond {threshold:.0%} and the spread")
    return 1 if worse else 0


def plot(df: pd.DataFrame, keys: list[str], out: str) -> None:
    """Throughput and p99 latencies (grouped bars over tp, one bar per value of the other grouping
    ``keys``, min-max error bars), and the control-plane one-way latency p50/p99 the same way."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("output_tok_s", "output throughput (tok/s)"), ("ttft_ms_p99", "TTFT p99 (ms)"),
              ("tpot_ms_p99", "TPOT p99 (ms)"), ("ctrl_oneway_us_p50", "control one-way p50 (us)"),
              ("ctrl_oneway_us_p99", "control one-way p99 (us)")]
    panels = [(m, t) for m, t in panels if df[m].notna().any()]
    ncols = min(3, len(panels))
    nrows = (len(panels) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.6 * nrows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    series_keys = [k for k in keys if k != "tp"]
    df = fill_keys(df, series_keys)
    df["series"] = df[series_keys].astype(str).agg(" | ".join, axis=1) if series_keys else "all"
    controls = sorted(df.series.unique())
    tps = sorted(df.tp.dropna().unique())
    width = 0.8 / max(len(controls), 1)
    for ax, (metric, title) in zip(axes.flat, panels):
        g = df.groupby(["tp", "series"])[metric]
        med, lo, hi = g.median(), g.min(), g.max()
        for i, c in enumerate(controls):
            x = np.arange(len(tps)) + (i - (len(controls) - 1) / 2) * width
            y = [med.get((t, c), np.nan) for t in tps]
            err = [[y_ - lo.get((t, c), y_) for t, y_ in zip(tps, y)], [hi.get((t, c), y_) - y_ for t, y_ in zip(tps, y)]]
            ax.bar(x, y, width, yerr=np.nan_to_num(err), capsize=3, label=c)
        ax.set_xticks(np.arange(len(tps)), [f"tp={int(t)}" for t in tps])
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(title=" | ".join(series_keys) or None, fontsize=7)
    fig.suptitle("median over repeats; error bars: min-max", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"plot written to {out}")


def print_sweep_summary(rows: list[dict], jobs: int) -> None:
    """The end of a sweep: the summary table of the rows it wrote (ok ones), and the exposed cost of each
    plane where the sweep ran ``control=ideal`` too."""
    print(f"\n== sweep: {jobs} jobs, {len(rows)} ok rows ==")
    if not rows:
        return
    df = pd.DataFrame(rows).reindex(columns=COLUMNS)
    for col in ["tp", "tpot_ms_p50"] + HIGHER_IS_BETTER + LOWER_IS_BETTER:
        df[col] = pd.to_numeric(df[col], errors="coerce")
    keys = group_keys(df, None)
    baseline = "ideal" if "ideal" in set(df.control) else "shm"
    table, keys = summary(df, keys, baseline)
    print_table(table, keys, baseline)
    print_exposed(exposed_cost(fill_keys(df, keys), keys))


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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.analyze", description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="*", help="results CSV files")
    p.add_argument("--group", nargs="+", help="grouping columns (default: tp, control and every other "
                                               "configuration column that differs between rows)")
    p.add_argument("--baseline", default="shm", help="control the ratios are relative to (default shm)")
    p.add_argument("--plot", metavar="OUT.png", help="write a PNG of grouped bars")
    p.add_argument("--compare", nargs=2, metavar=("OLD.csv", "NEW.csv"), help="regression check between two files")
    p.add_argument("--threshold", default="10%", help="regression threshold for --compare (default 10%%)")
    args = p.parse_args(argv)
    try:
        if args.compare:
            if args.files:
                raise InputError("--compare takes exactly two files; drop the other file arguments")
            threshold = parse_threshold(args.threshold)
            return compare(load([args.compare[0]]), load([args.compare[1]]), threshold)
        if not args.files:
            p.error("give at least one CSV file, or --compare OLD NEW")
        df = load(args.files)
        if df.empty:
            raise InputError("no rows with status ok")
        keys = group_keys(df, args.group)
        table, keys = summary(df, keys, args.baseline)
        print_table(table, keys, args.baseline)
        print_exposed(exposed_cost(fill_keys(df, keys), keys))
        if args.plot:
            directory = os.path.dirname(os.path.abspath(args.plot))
            if not os.path.isdir(directory):
                raise InputError(f"--plot: directory {directory} does not exist")
            if not args.plot.lower().endswith((".png", ".pdf", ".svg")):
                raise InputError(f"--plot: give a .png, .pdf or .svg file name, got {args.plot!r}")
            plot(df, keys, args.plot)
        return 0
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
