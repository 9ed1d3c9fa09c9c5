"""``python -m harness.analyze FILE.csv|DIR [...]``: tables, plots and regression checks over results CSVs.

    python -m harness.analyze results/runs.csv                       # the tables, at most 120 columns wide
    python -m harness.analyze results/cpu/                           # every CSV there, diverted rows included
    python -m harness.analyze runs.csv --format markdown             # more metrics: median [min-max] (ratio)
    python -m harness.analyze runs.csv --format csv > summary.csv    # those numbers, for a spreadsheet
    python -m harness.analyze runs.csv --group tp control payload    # any grouping columns
    python -m harness.analyze runs.csv --plot out.png                # exposed cost first, the rest beside it
    python -m harness.analyze --compare OLD.csv NEW.csv --threshold 10%   # exit 1 on a regression

Exit codes: 0 ok, 1 a regression or a missing/failed configuration (--compare), or no ok row at all (every run
failed); 2 unreadable input or bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import textwrap
from functools import partial

import pandas as pd

from common import OneLineParser

from .compare import compare, parse_metrics, parse_threshold, provenance_notes
from .exposed import exposed_cost, print_exposed, sent_apart, why_no_exposed_cost
from .host_cpu import busy_note
from .load_results import NUMERIC, InputError, file_failed_rows, is_serve, load, prepare_serve
from .plot_common import check_plot_path, same_words, side_path
from .schema import ADDED_IN, COLUMNS
from .signals import AT_ONCE, exit_interrupted, install, interrupted_line, outlive_stdout_reader, stdout_lost, stopping
from .summary_table import csv_rows, default_baseline, print_table

# the serve keys before overrides, so that the rows of a rate sweep sort by rate (4, 16, inf), not as text
CONFIG_KEYS = ["engine", "control", "tp", "launcher", "nodes", "model", "model_hash", "device", "dtype", "cpu_threads",
               "all_reduce", "gemm", "workload", "request_rate", "burstiness", "max_concurrency", "slo", "overrides",
               "payload", "seed", "tag"]


DERIVED_FROM_TP = ("cpu_threads", "all_reduce")  # the engine sets them from tp when not given


def group_keys(df: pd.DataFrame, group: list[str] | None) -> list[str]:
    """The columns that identify a configuration: ``group`` when given, else tp, control and every other
    configuration column that differs between rows, but DERIVED_FROM_TP where one value goes with each tp (a tp
    ladder then shares its tables); ``main`` has checked ``group``."""
    if group:
        return group
    return ["tp", "control"] + [k for k in CONFIG_KEYS if k not in ("tp", "control")
                                and df[k].nunique(dropna=False) > 1 and not (
                                    k in DERIVED_FROM_TP and df.groupby("tp")[k].nunique(dropna=False).max() == 1)]


def comparable_keys(old: pd.DataFrame, new: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(the configuration keys ``--compare`` matches rows on, the keys it leaves out; never ``tag``). A key one
    file's schema predates (``schema.ADDED_IN``) is left out where the other holds one value in it on every row."""
    keys, dropped = [], []
    for k in CONFIG_KEYS:
        in_old, in_new = old[k].notna().any(), new[k].notna().any()
        if k == "tag" or not (in_old or in_new):  # tag labels the runs on each side (tag=baseline, tag=pr-123)
            continue
        filled, lacking = (old, new) if in_old else (new, old)
        predates = pd.to_numeric(lacking["schema_version"], errors="coerce").max() < ADDED_IN.get(k, 0)
        one_sided = in_old != in_new and predates and filled[k].nunique(dropna=False) == 1
        (dropped if one_sided else keys).append(k)
    return keys, dropped


def fill_keys(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Empty key cells become "-" (a group of their own that indexes like any other)."""
    return df.assign(**{k: df[k].astype(object).where(df[k].notna(), "-") for k in keys if df[k].isna().any()})


def _parts(df: pd.DataFrame, keys: list[str], group: list[str] | None) -> list[tuple[str, pd.DataFrame, list[str]]]:
    """(kind, rows, keys) per kind of row in ``df``: engine, broadcast, serve; keyed by its own rows if not alone.
    Serve rows always show their request rate (the load they ran at), also when they share one."""
    serve = is_serve(df)
    bcast = ~serve & (df.workload == "broadcast")
    parts = [(kind, rows) for kind, rows in (("engine", df[~serve & ~bcast]), ("broadcast", df[bcast]),
                                             ("serve", df[serve])) if not rows.empty]
    out = []
    for kind, rows in parts:
        k = keys if len(parts) == 1 else group_keys(rows, group)
        if kind == "serve" and not group and "request_rate" not in k:
            k = [*k[:2], "request_rate", *k[2:]]
        out.append((kind, rows, k))
    return out


def report(df: pd.DataFrame, group: list[str] | None, baseline: str | None, fmt: str = "text") -> list[str]:
    """Print the summary and exposed-cost tables of each kind of row in ``fmt`` (csv: one CSV, a ``table`` column);
    ratios to ``baseline``, else ``default_baseline()``. Returns the keys."""
    keys = group_keys(df, group)
    parts = _parts(df, keys, group)
    if note := busy_note(df):  # csv: on stderr, beside the list of files read
        print("\n".join(textwrap.wrap(note, 110, subsequent_indent="  ")), file=sys.stderr if fmt == "csv" else None)
    frames = []
    for i, (kind, rows, k) in enumerate(parts):
        base, filled = baseline or default_baseline(rows), fill_keys(rows, k)
        if kind == "serve" and base == "ideal":  # ideal's TTFT and queueing follow its recording: no ratio base
            base = None
        if kind == "serve" and baseline and fmt != "csv" and (baseline == "ideal" or fmt == "text"):
            print(f"note: --baseline {baseline}: " + ("no ratios for serve rows: ideal's TTFT and queueing follow "
                  "its recording; the exposed-cost table compares planes to it" if baseline == "ideal" else
                  "the text serve table has no ratio columns (--format markdown has)"))
        exposed = exposed_cost(filled[filled.status == "ok"], k)
        if fmt == "csv":  # the settings every row of this kind shares are columns too (text: a line above)
            same = {c: rows[c].iloc[0] for c in CONFIG_KEYS if c not in k and rows[c].nunique(dropna=False) == 1
                    and pd.notna(rows[c].iloc[0])}
            frames.append(csv_rows(kind, filled, k, base).assign(**same))
            if not exposed.empty:  # its notes on stderr, as the list of files read
                sys.stderr.write("".join(f"{line}\n" for line in sent_apart(exposed)))
                frames.append(exposed.rename(columns={"repeats": "repeats_plane_ideal"}).assign(table="exposed",
                                                                                                 **same))
            continue
        if i:
            print()
        whose = "every row" if len(parts) == 1 else f"every row of this table ({len(rows)} of {len(df)})"
        if same := same_words(rows):
            print(f"{whose}: " + ", ".join(same))
        if rows.overrides.nunique(dropna=False) == 1 and isinstance(rows.overrides.iloc[0], str):  # no section says
            print(textwrap.fill(f"{whose}: overrides {rows.overrides.iloc[0]}", 110, subsequent_indent="  "))
        if group and (pooled := [k for k in CONFIG_KEYS if k not in group  # within one group, not across them
                                 and rows.groupby(group, dropna=False)[k].nunique(dropna=False).gt(1).any()]):
            print(f"note: --group {' '.join(group)} pools rows that differ in {', '.join(pooled)}")
        print_table(kind, filled, k, base, fmt)
        print_exposed(exposed, fmt)
    if frames:
        print(pd.concat(frames, ignore_index=True).to_csv(index=False, float_format="%.7g"), end="")
    return keys


def print_sweep_summary(rows: list[dict], jobs: int, interrupted: bool = False, not_ok: int = 0) -> None:
    """The end of a sweep or of one job's repeats (``interrupted``: at job ``jobs``; ``not_ok``: jobs that did not
    exit 0): ``report`` of its ok rows."""
    kind = "sweep" if jobs > 1 or interrupted else "repeats"
    failed = f", {not_ok} job{'s' * (not_ok != 1)} not ok" if not_ok else ""
    print(f"\n== {kind}{' (interrupted)' if interrupted else ''}: {jobs} job{'s' * (jobs != 1)}, "
          f"{len(rows)} ok row{'s' * (len(rows) != 1)}{failed} ==")
    if rows:
        df = pd.DataFrame(rows).reindex(columns=COLUMNS)
        df[NUMERIC] = df[NUMERIC].apply(pd.to_numeric, errors="coerce")
        report(prepare_serve(df), None, None)


# per kind of rows its figures: (what it is, file name suffix beside OUT); an exposed-cost one where ideal ran
FIGURES = {"engine": [("exposed-cost figure (each plane's decode step and TPOT p50 minus control=ideal's)", "exposed"),
                      ("raw-metric figure (p50 bars, p99 whiskers)", "raw")],
           "broadcast": [("broadcast figure (one-way latency p50 and p99 against message size)", "broadcast")],
           "serve": [("workload=serve rows: latency-vs-load plot", "load"),
                     ("workload=serve rows: exposed-cost figure per request rate", "serve_exposed")]}


def plot_figures(ok: pd.DataFrame, keys: list[str], group: list[str] | None, out: str) -> None:
    """Write the FIGURES of the ok rows (at least one), the first to ``out``, the others beside it (``side_path``),
    a line each. Raises InputError: a file that cannot be written."""
    from .plot_curves import plot_broadcast, plot_load
    from .plots import plot, plot_exposed

    parts, draws, figures = _parts(ok, keys, group), {"raw": plot, "broadcast": plot_broadcast, "load": plot_load}, []
    for kind, rows, k in parts:
        rows = fill_keys(rows, k)
        table = exposed_cost(rows, k)
        figures += [(what, suffix, draws.get(suffix, partial(plot_exposed, table=table)), rows, k)
                    for what, suffix in FIGURES[kind] if suffix in draws or not table.empty]
    for i, (what, suffix, draw, rows, k) in enumerate(figures):
        path = out if i == 0 else side_path(out, suffix)
        try:
            draw(rows, k, path)
        except OSError as e:
            raise InputError(f"--plot: cannot write {path}: {e.strerror or e}") from None
        print(f"{what} written to {path}")
    if parts[0][0] == "engine" and figures[0][1] != "exposed":
        print(f"no exposed-cost figure: {why_no_exposed_cost(ok)}")


def parser() -> OneLineParser:
    """The command line's options (see the module docstring)."""
    p = OneLineParser(prog="python -m harness.analyze", description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="*", help="results CSV files or directories")
    p.add_argument("--group", nargs="+", help="grouping columns (default: tp, control and every other "
                                               "configuration column that differs between rows)")
    p.add_argument("--baseline", help="control the ratios are relative to (default: ideal where the rows have "
                                      "it, else shm, else the first plane); the table's header names it")
    p.add_argument("--format", choices=("text", "markdown", "csv"), help="text (default): tables "
                   "of at most 120 columns, the main metrics; markdown: every key and more metrics (mean, p50, p99 of "
                   "TTFT, TPOT, ITL, E2EL...), median [min-max] (ratio); csv: every number of both tables, one CSV (a "
                   "table column: summary, serve or exposed)")
    p.add_argument("--plot", metavar="OUT.png", help="write the figures: each plane's exposed cost beside ideal first, "
                   "the raw metrics, broadcast and serve sweeps beside it (OUT_raw.png, ...; a line names each file)")
    p.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="regression gate between two files")
    p.add_argument("--threshold", help="regression threshold for --compare (default 10%%)")
    p.add_argument("--allow-missing", action="store_true", help="--compare: configurations missing or failed "
                                                                 "on a side are listed but do not fail the gate")
    p.add_argument("--metrics", nargs="+", help="--compare: only these metrics (spaces or commas between)")
    return p


def _given(args: argparse.Namespace, options: tuple[str, ...]) -> list[str]:
    """Those of ``options`` (``--name``) given on the command line (their defaults are None or False)."""
    return [o for o in options if getattr(args, o[2:].replace("-", "_")) not in (None, False)]


def run_compare(args: argparse.Namespace) -> int:
    """``--compare OLD NEW``: the gate's exit code. Raises InputError on bad input."""
    if args.files:
        raise InputError("--compare takes exactly two files; drop the other file arguments")
    if given := _given(args, ("--group", "--baseline", "--plot", "--format")):
        raise InputError(f"{', '.join(given)} {'do' if len(given) > 1 else 'does'} not apply to --compare, which "
                         "prints its own table")
    threshold = parse_threshold("10%" if args.threshold is None else args.threshold)
    metrics = parse_metrics(args.metrics)
    with contextlib.redirect_stderr(io.StringIO()) as read:  # said once both files are read, not before an error
        sides = [load([path]) for path in args.compare]
    print(read.getvalue(), end="", file=sys.stderr)
    damaged = {side: df.attrs["damaged"] for side, df in zip(("OLD", "NEW"), sides)}
    sides = [prepare_serve(df) for df in sides]
    both = pd.concat(sides, ignore_index=True)  # a run that failed at start-up in NEW files with OLD's rows too
    old, new = [file_failed_rows(df, CONFIG_KEYS, both) for df in sides]
    keys, one_sided = comparable_keys(old, new)
    if one_sided:
        print(f"note: rows not matched on {', '.join(one_sided)}: one file's schema predates the column, and the "
              f"other holds one value in it")
    for note in filter(None, [busy_note(old, "OLD"), busy_note(new, "NEW"), *provenance_notes(old, new)]):
        print(textwrap.fill(note, 110, subsequent_indent="  "))
    return compare(fill_keys(old, keys), fill_keys(new, keys), keys, threshold, args.allow_missing, metrics, damaged)


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit code (the module docstring's)."""
    p = parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    for i in range(len(argv) - 1):  # "--threshold -5%": argparse would take -5% for an option, not the value
        if argv[i] == "--threshold" and argv[i + 1].startswith("-"):
            argv[i:i + 2] = [f"--threshold={argv[i + 1]}"]
            break
    args = p.parse_args(argv)
    # "--group tp FILE": nargs takes FILE for a column too; a path after the first column is a file
    paths = [g for g in (args.group or [])[1:] if g not in CONFIG_KEYS and (os.path.exists(g) or g.endswith(".csv"))]
    if paths:
        args.group = [g for g in args.group if g not in paths]
        args.files = sorted(args.files + paths, key=argv.index)
    try:
        if args.compare:
            return run_compare(args)
        if not args.files:
            p.error("give at least one CSV file or directory, or --compare OLD NEW")
        if given := _given(args, ("--threshold", "--allow-missing", "--metrics")):
            raise InputError(f"{', '.join(given)} {'apply' if len(given) > 1 else 'applies'} only to --compare OLD NEW")
        args.format = args.format or "text"
        if args.group is not None:  # names apart by spaces or commas, as --metrics takes them
            args.group = [g for arg in args.group for g in arg.split(",") if g]
            if not args.group:
                raise InputError("--group: give at least one configuration column")
        if bad := [g for g in args.group or () if g not in CONFIG_KEYS]:  # before the files are read and listed
            raise InputError(f"unknown --group column(s): {', '.join(bad)}; configuration columns: "
                             f"{', '.join(CONFIG_KEYS)}")
        if twice := sorted({g for g in args.group or () if args.group.count(g) > 1}):
            raise InputError(f"--group: {', '.join(twice)} given twice")
        if args.plot is not None:
            check_plot_path(args.plot)
        with contextlib.redirect_stderr(io.StringIO()) as listing:  # said once the rows pass, not before an error
            df = file_failed_rows(prepare_serve(load(args.files)), CONFIG_KEYS)
        if args.baseline is not None and args.baseline not in set(df.control.dropna()):
            raise InputError(f"--baseline {args.baseline or repr('')}: no such control in the rows (they have "
                             f"{', '.join(sorted(set(df.control.dropna())))})")
        print(listing.getvalue(), end="", file=sys.stderr)
        keys = report(df, args.group, args.baseline, args.format)
        if not (df.status == "ok").any():  # every run failed, the tables said why: exit 1, as the runs did
            print("error: no ok row: every run failed" + (f"; {args.plot} not written" if args.plot else ""),
                  file=sys.stderr)
            return 1
        if args.plot is not None:  # its line to stderr under --format csv, which is for a program to read
            with contextlib.redirect_stdout(sys.stderr if args.format == "csv" else sys.stdout):
                plot_figures(df[df.status == "ok"], keys, args.group, args.plot)
        return 0
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    install()  # Ctrl-C, SIGTERM, SIGHUP: one line and 128 + N, also when a library swallowed the interrupt
    outlive_stdout_reader()  # `--compare ... | head`: the gate's exit code and the figures, as without the pipe
    code = None
    with contextlib.suppress(KeyboardInterrupt):  # the stop is said below, as when a library swallowed it
        AT_ONCE.clear()  # set by install: from here a stop signal stops in order (said below)
        code = main()
    if stopping():
        print(interrupted_line(), file=sys.stderr)
        exit_interrupted()
    sys.exit(code or int(stdout_lost()))  # the tables are what it makes
