"""Appending one row per run to a CSV: header written once, atomic appends under a file lock.

Concurrent runs (a multirun sweep, two jobs on one host) each add exactly one whole line: the line is
built in memory and written with one ``write`` while holding ``<file>.lock``. An existing file whose header
differs from this schema is never touched: the row goes to ``<stem>.schema<N>-<hash>.csv`` beside it.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os

from filelock import FileLock


def _line(values: list) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(["" if v is None else v for v in values])
    return buf.getvalue()


def append_row(path: str, columns: list[str], row: dict, schema_version: int) -> str:
    """Append ``row`` (keys from ``columns``; missing keys are empty cells) to ``path``.

    Returns the path actually written (another one when ``path`` has a different header).
    Raises:
        KeyError: ``row`` has a key not in ``columns`` (a programming error: the schema must list it).
    """
    unknown = set(row) - set(columns)
    if unknown:
        raise KeyError(f"columns missing from the schema: {sorted(unknown)}")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    header = _line(columns)
    with FileLock(path + ".lock", timeout=60):
        if os.path.exists(path) and os.path.getsize(path) > 0:
            with open(path, newline="") as f:
                existing = f.readline()
            if existing != header:
                stem, ext = os.path.splitext(path)
                digest = hashlib.sha1(header.encode()).hexdigest()[:8]
                return append_row(f"{stem}.schema{schema_version}-{digest}{ext}", columns, row, schema_version)
            text = _line([row.get(c) for c in columns])
            with open(path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":  # a crashed writer left a partial line: keep ours whole
                    text = "\n" + text
        else:
            text = header + _line([row.get(c) for c in columns])
        with open(path, "a", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    return path
