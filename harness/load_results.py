"""Reading results CSVs for analysis: files or directories, every schema version, damaged lines refused with
a message rather than counted, failed rows kept (so that they can be counted); workload=serve rows' columns."""

from __future__ import annotations

import csv
import glob
import io
import os
import re
import sys
import textwrap
from collections import Counter

import numpy as np
import pandas as pd

from common import first_line

from .schema import COLUMNS, LATENCY, RENAMED, SCHEMA_VERSION, TEXT, normalize_overrides

REQUIRED = ["schema_version", "control", "tp", "status"]
NUMERIC = ["tp", "duration_s", "output_tok_s", "total_tok_s", "req_s", *LATENCY, "decode_step_ms_p50",
           "decode_step_ms_p99", "ctrl_oneway_us_p50", "ctrl_oneway_us_p99", "ctrl_bytes_mean", "ctrl_calls",
           "ctrl_launch_lag_us_mean", "ctrl_launch_lag_us_p50", "ctrl_launch_late_us_mean", "repeat"]
ABSURD = 1e12  # no measured value comes near, in any unit (a cell of 1e300 printed 300 digits in the tables)
# a time, rate, size or count: a negative cell was edited or damaged (a launch lag and a one-way latency measured
# across nodes' clocks can be negative)
CANNOT_BE_NEGATIVE = [c for c in NUMERIC if not c.startswith(("ctrl_launch_lag", "ctrl_oneway"))]
COUNTS = ["nodes", "max_concurrency"]  # settings shown as integers (1, not 1.0)
SERVE_NUMERIC = ["request_rate", "burstiness", "max_concurrency", "achieved_rate_req_s", "goodput_req_s",
                 "peak_output_tok_s", "peak_concurrent_requests"]
# a serve setting has its own column: out of ``overrides``, so rate 16 by default or typed is one configuration
SERVE_OVERRIDE = re.compile(r"workload\.(cpu\.)?(request_rate|burstiness|max_concurrency|slo)[.=]")


class InputError(ValueError):
    """A results file that cannot be analysed; the message says which and why."""


def find_csvs(paths: list[str]) -> list[tuple[str, bool]]:
    """(file, named) per CSV file named (named=True) and ``*.csv`` at the top of a directory named, diverted rows'
    too, each once. Raises InputError: a path that does not exist, a directory without CSV files."""
    files, given = [], {os.path.realpath(p) for p in paths}
    for path in paths:
        if os.path.isdir(path):
            found = sorted(glob.glob(os.path.join(path, "*.csv")))
            if odd := [f for f in found if not (os.path.isfile(f) or os.path.isdir(f))]:  # a FIFO: reading it hangs
                print(f"note: skipped {_some(odd, 3)}: not a regular file", file=sys.stderr)
                found = [f for f in found if f not in odd]
            below = sorted(d for d in os.listdir(path)  # steps/: step logs (python -m harness.step_log reads one)
                           if d != "steps" and glob.glob(os.path.join(path, d, "**", "*.csv"), recursive=True))
            if not found:
                raise InputError(f"{path}: no *.csv file in this directory" + (
                    f" (its folders are not searched; name one: {_some(below, 4)})" if below else ""))
            if below:
                print(f"note: {path}: its folders are not read ({_some(below, 6)}); name one to read it",
                      file=sys.stderr)
            if diverted := [f for f in found if re.search(r"\.schema|\.unwritten-", os.path.basename(f))]:
                print(f"note: {path} holds {len(diverted)} file(s) of diverted rows, read too: "
                      f"{', '.join(os.path.basename(f) for f in diverted)}", file=sys.stderr)
            files += [(f, False) for f in found]
        elif os.path.isfile(path):
            files.append((path, True))
            stem = glob.escape(os.path.splitext(path)[0])
            beside = [f for f in sorted(glob.glob(stem + ".schema*.csv") + glob.glob(stem + ".unwritten-*.csv"))
                      if os.path.realpath(f) not in given]
            if beside:
                print(f"note: {path}: rows diverted from it sit beside it, not read: {_some(beside, 3)} (name them, "
                      f"or the folder: python -m harness.analyze {os.path.dirname(path) or '.'})", file=sys.stderr)
        else:
            raise InputError(f"{path}: {'not a regular file' if os.path.exists(path) else 'no such file or directory'}")
    once: dict[str, tuple[str, bool]] = {}  # a file named twice, or named and in a folder named: read once
    times = Counter(os.path.realpath(f) for f, _ in files)
    for f, named in files:
        if (real := os.path.realpath(f)) in once:
            f, named = once[real][0], named or once[real][1]
        elif times[real] > 1:
            print(f"note: {f} is given {times[real]} times (by name or in a folder): read once", file=sys.stderr)
        once[real] = (f, named)
    return list(once.values())


def _some(names: list[str], most: int) -> str:
    """The first ``most`` of ``names``, and how many more: "a, b, c and 3 more"."""
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def _read_one(path: str) -> pd.DataFrame:
    """One results CSV's rows, damaged lines left out with a warning. Raises InputError: unreadable, empty, not
    text, not CSV, without the REQUIRED columns, a header only."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror or e})") from None
    if not data.strip():
        raise InputError(f"{path}: empty file")
    lines = data.split(b"\n")
    if b"\0" in lines[0]:
        raise InputError(f"{path}: not a text CSV file")
    binary = sum(b"\0" in line for line in lines)  # garbage appended: those lines, not the file, are lost
    text = b"\n".join(line for line in lines if b"\0" not in line).decode("utf-8-sig", "replace")  # a BOM: no cell
    replaced, truncated = text.count("\ufffd"), not text.endswith("\n")
    text = text[:text.rfind("\n") + 1]
    if not text:
        raise InputError(f"{path}: not one whole line (a writer died in its header?)")
    if binary or replaced:  # a hand edit in Latin-1: its bytes read as U+FFFD, its row kept
        print(f"warning: {path}: ignored {binary} line(s) of binary data, read {replaced} byte(s) not UTF-8 as U+FFFD",
              file=sys.stderr)
    # A row with more or fewer cells than the header is damaged: pandas would drop the first kind but fill the
    # second with empty cells and count it (a writer that died mid-row, whose line the next writer ended).
    # Each line alone (the harness writes no cell with a newline): a stray quote damages its own line, not the rest.
    try:
        records = [r for line in text.split("\n") if (r := next(csv.reader([line]), []))]
    except csv.Error as e:
        raise InputError(f"{path}: not a readable CSV ({e})") from None
    missing = [c for c in REQUIRED if not records or c not in records[0]]
    if missing:  # before any warning about its lines: another tool's CSV is not a damaged results CSV
        raise InputError(f"{path}: missing column(s) {', '.join(missing)}; is this a results CSV?")
    headers = sum(r == records[0] for r in records[1:])  # files joined with cat: their headers are no rows
    good = [records[0]] + [r for r in records[1:] if len(r) == len(records[0]) and r != records[0]]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(good)
    try:
        df = pd.read_csv(io.StringIO(buf.getvalue()), keep_default_na=False, na_values=[""],  # "NaN" typed: warned
                         dtype=dict.fromkeys(TEXT, str))
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise InputError(f"{path}: not a readable CSV ({first_line(e)})") from None
    df = df.mask(df.eq(""))  # pandas keeps "" in a column it read as text for an integer past int64 (not na_values)
    if df.empty and (rows := [r for r in records[1:] if r != records[0]]):  # an edited header: not "a header only"
        widths = sorted({len(r) for r in rows})
        raise InputError(f"{path}: none of its {len(rows)} row(s) has the header's {len(records[0])} cells (they have "
                         f"{', '.join(map(str, widths))}): damaged rows, or a header edited by hand?")
    if df.empty:
        raise InputError(f"{path}: no whole row (a header only" + (", then a truncated line)" if truncated else ")"))
    damaged = len(records) - len(good) - headers
    lost = ["ignored its truncated last line (no newline: a writer died mid-row?)"] * truncated
    lost += [f"ignored {damaged} damaged line(s) (wrong number of cells)"] * bool(damaged)
    for line in lost:  # warned once the file is known to be read: an error is one line
        print(f"warning: {path}: {line}", file=sys.stderr)
    if headers:
        print(f"note: {path}: ignored {headers} repeated header line(s) (files joined with cat?)", file=sys.stderr)
    lost = [f"ignored {binary} line(s) of binary data"] * bool(binary) + lost  # that one warned above
    df.attrs["damaged"] = [f"{path}: {line}" for line in lost]  # the gate fails on them (compare)
    return df


def load(paths: list[str]) -> pd.DataFrame:
    """Every row of the CSVs (``find_csvs``) in the current schema, a line per file read or skipped to stderr;
    ``attrs["damaged"]``: a line per file's lost lines, and for rows of one run_id that differ. Raises InputError: a
    file named that ``_read_one`` refuses; no CSV read."""
    frames, lines, damaged = [], [], []
    for path, named in find_csvs(paths):
        try:
            df = _read_one(path)
        except InputError as e:
            if named:
                raise
            lines.append(f"skipped {e}")
            continue
        damaged += df.attrs["damaged"]
        frames.append(_normalize(df, path))
        ok, stalled = int((df.status == "ok").sum()), int((df.status == "stalled").sum())
        lines.append(f"read {path}: {len(df)} row(s), {ok} ok, {len(df) - ok - stalled} failed"
                     + f", {stalled} stalled (left out like the failed)" * bool(stalled))
        errors = df[df.status != "ok"].reindex(columns=["status", "error"]).value_counts(dropna=False)
        lines += [f"  {n} {status}: {textwrap.shorten(str(e), 100) if pd.notna(e) else '(no error)'}"
                  for (status, e), n in errors.items()]
    if not frames:
        raise InputError(f"no results CSV among {', '.join(paths)} ({'; '.join(lines)})")
    print("\n".join(lines), file=sys.stderr)
    df = pd.concat(frames, ignore_index=True)
    twice = df.run_id.notna() & df.duplicated("run_id") | df.run_id.isna() & df.duplicated()
    if twice.any():  # a copy of a file: its rows are not more repeats
        differ = int(df[df.run_id.notna()].drop_duplicates().duplicated("run_id").sum())  # an edited copy
        print(f"note: dropped {int(twice.sum())} row(s) read twice (same run_id, or identical without one: a copy?)",
              file=sys.stderr)
        if differ:
            damaged.append(f"{differ} row(s) of {', '.join(paths)} differ from another of their run_id (kept: the "
                           f"first read)")
            print(f"warning: {damaged[-1]}", file=sys.stderr)
    df = _apart_by_size(df[~twice].reset_index(drop=True))
    df.attrs["damaged"] = damaged
    return df


def _apart_by_size(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` where a broadcast payload met at sizes more than 2% apart (two message formats of one name) is
    named with its size, "decode-256 (6684 B)", so that no table pools them; a note says which. Sizes within 2%
    (a pickled counter one byte longer) stay one payload, named by the smallest."""
    sizes = pd.to_numeric(df.payload_bytes, errors="coerce")
    names = []
    for name, row_sizes in sizes.dropna().groupby(df.payload):
        levels = sorted(row_sizes.unique())
        starts = [v for i, v in enumerate(levels) if i == 0 or v > 1.02 * levels[i - 1]]
        if len(starts) > 1:
            names.append(name)
            first = np.array(starts)[np.searchsorted(starts, row_sizes, side="right") - 1]
            df.loc[row_sizes.index, "payload"] = [f"{name} ({int(v)} B)" for v in first]
    if names:
        print(f"note: {len(names)} payload(s) come at sizes more than 2% apart (payload_bytes), told apart by size: "
              f"{', '.join(names[:4])}{' ...' if len(names) > 4 else ''}", file=sys.stderr)
    return df


def _normalize(df: pd.DataFrame, path: str) -> pd.DataFrame:
    """One file's rows in the current schema: columns renamed or added, numeric cells numbers (damaged ones empty,
    counted in a warning), ``overrides`` in one spelling."""
    df = df.rename(columns={old: new for old, new in RENAMED.items() if new not in df.columns})
    version = pd.to_numeric(df.schema_version, errors="coerce").max()
    if version > SCHEMA_VERSION:
        print(f"warning: {path}: schema_version {version:g} is newer than this harness's ({SCHEMA_VERSION}): "
              f"columns it does not know are left out", file=sys.stderr)
    lacking = [c for c in NUMERIC + SERVE_NUMERIC if c not in df.columns]
    if version >= SCHEMA_VERSION and lacking:  # its schema has them
        print(f"warning: {path}: no column{'s' * (len(lacking) > 1)} {_some(lacking, 4)} (its schema has "
              f"{'them' if len(lacking) > 1 else 'one'}): read as empty", file=sys.stderr)
    df = df.reindex(columns=[*df.columns, *(c for c in COLUMNS if c not in df.columns)])
    numbers = df[NUMERIC].apply(pd.to_numeric, errors="coerce")
    numbers = numbers.mask(numbers.abs() >= ABSURD)  # inf too
    negative = numbers[CANNOT_BE_NEGATIVE] < 0
    counts = df[COUNTS].apply(pd.to_numeric, errors="coerce")  # integers in the tables: a damaged cell failed them
    counts = counts.mask(counts.abs() >= ABSURD)
    odd = pd.concat([(numbers.tp >= 0) & ((numbers.tp < 1) | (numbers.tp % 1 != 0)),  # tp=0, tp=2.5
                     counts.notna() & ((counts < 1) | (counts % 1 != 0))], axis=1)
    unread = pd.concat([numbers.isna() & df[NUMERIC].notna(), counts.isna() & df[COUNTS].notna()], axis=1)
    for cells, what in ((unread, "non-numeric, NaN, infinite or absurd (beyond ±1e12) cell(s) in column {}"),
                        (negative, "negative cell(s) in column {} (it cannot be negative)"),
                        (odd, "cell(s) in column {} that are not a whole number >= 1")):
        for col, bad in cells.sum()[cells.any()].items():  # the columns with such cells
            print(f"warning: {path}: ignored {bad} {what.format(col)}", file=sys.stderr)
    numbers[CANNOT_BE_NEGATIVE] = numbers[CANNOT_BE_NEGATIVE].mask(negative)
    numbers["tp"] = numbers.tp.mask(odd.tp)
    df[NUMERIC], df[COUNTS] = numbers, counts.mask(odd[COUNTS]).astype("Int64")
    oneway = ["ctrl_oneway_us_p50", "ctrl_oneway_us_p99", "ctrl_oneway_over_step_pct"]  # ideal has no transport:
    df[oneway] = df[oneway].mask(df.control.eq("ideal").to_numpy()[:, None] & df[oneway].eq(0))  # empty, not 0 (older)
    df["overrides"] = df["overrides"].map(normalize_overrides)
    return df


def is_serve(df: pd.DataFrame) -> pd.Series:
    """Which rows are workload=serve runs (a request rate, or the workload so named)."""
    return df.request_rate.notna() | (df.workload == "serve")


def prepare_serve(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the serve columns numeric (request_rate and burstiness keep ``inf``: settings), max_concurrency
    an integer, and the serve settings out of serve rows' ``overrides``."""
    df = df.copy()
    for col in SERVE_NUMERIC:
        values = pd.to_numeric(df[col], errors="coerce")
        df[col] = values if col in ("request_rate", "burstiness") else values.replace([np.inf, -np.inf], np.nan)
    df["max_concurrency"] = df.max_concurrency.round().astype("Int64")
    df["overrides"] = [(" ".join(i for i in t.split() if not SERVE_OVERRIDE.match(i)) or None)
                       if serve and isinstance(t, str) else t for t, serve in zip(df.overrides, is_serve(df))]
    return df


ENGINE_SAID = ["launcher", "nodes", "cpu_threads", "all_reduce", "gemm"]  # a row has them once its engine started


def file_failed_rows(df: pd.DataFrame, keys: list[str], reference: pd.DataFrame | None = None) -> pd.DataFrame:
    """``df`` where a failed row without ENGINE_SAID (its run failed while the engine started) takes them from
    the rows with them (ok, or failed later) in ``reference`` (default ``df``; ``--compare``: both files) that match
    it on every other of the configuration ``keys``, if those agree: filed with them."""
    other, ref = [k for k in keys if k not in ENGINE_SAID], df if reference is None else reference
    said_rows = ref[ref[ENGINE_SAID].notna().any(axis=1)]
    said_text, text = (d[other].astype(object).fillna("-").astype(str) for d in (said_rows, df))
    for i in df.index[(df.status != "ok") & df[ENGINE_SAID].isna().all(axis=1)]:
        match = (said_text == text.loc[i]).all(axis=1)
        said = said_rows.loc[match, ENGINE_SAID].drop_duplicates()
        if len(said) == 1:
            df.loc[i, ENGINE_SAID] = said.iloc[0].to_numpy()
    return df
