"""Appending one row per run to a CSV, each row one whole line written under ``<file>.lock``; a file with another
schema's header is never touched (the row goes to ``<stem>.schema<N>-<hash>.csv``). Per-run files beside the CSV:
``runs/<run_id>.json``, ``requests/<run_id>.jsonl`` (``save_requests``), ``traces/<run_id>_rank<k>.json``."""

from __future__ import annotations

import contextlib
import csv
import datetime
import hashlib
import io
import json
import math
import os
import sys
import tempfile
import uuid

from filelock import FileLock, Timeout

from .signals import stopping, whole


def _line(values: list) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(values)  # None: an empty cell
    return buf.getvalue()


# vLLM's result key -> this project's column (vllm/benchmarks/serve.py, calculate_metrics and its result dict)
VLLM_ALIASES = {"completed": "num_requests", "total_input_tokens": "input_tokens",
                "total_output_tokens": "output_tokens", "duration": "duration_s",
                "request_throughput": "req_s", "output_throughput": "output_tok_s",
                "total_token_throughput": "total_tok_s", "request_goodput": "goodput_req_s",
                "request_rate": "request_rate", "burstiness": "burstiness", "max_concurrency": "max_concurrency"}
VLLM_ALIASES |= {f"{stat}_{m}_ms": f"{m}_ms_{col}" for m in ("ttft", "tpot", "itl", "e2el")
                 for stat, col in (("mean", "mean"), ("median", "p50"), ("std", "std"), ("p90", "p90"), ("p99", "p99"))}
LOCK_WAIT_S = 60.0  # then the row goes to a fallback file (Results)


def append_row(path: str, columns: list[str], row: dict, schema_version: int) -> str:
    """Append ``row`` (keys from ``columns``; missing keys are empty cells) to ``path``; returns the path written
    (another when ``path`` has another header). Raises KeyError on a key not in ``columns`` (the schema's),
    filelock.Timeout after ``LOCK_WAIT_S`` (a wait over 1 s says so on stderr)."""
    if unknown := set(row) - set(columns):
        raise KeyError(f"columns missing from the schema: {sorted(unknown)}")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    header, line = _line(columns), _line([row.get(c) for c in columns])
    lock = FileLock(path + ".lock")
    try:
        held = lock.acquire(timeout=1.0)
    except Timeout:
        if stopping():  # a stop signal came: the row goes to a fallback file now, not in a minute
            raise
        print(f"waiting for {path}.lock (another process is writing the results; up to {LOCK_WAIT_S:.0f} s)",
              file=sys.stderr, flush=True)
        held = lock.acquire(timeout=LOCK_WAIT_S - 1.0)
    with held:
        text = header + line
        if os.path.exists(path) and os.path.getsize(path) > 0:
            with open(path, "rb") as f:  # bytes: a hand edit's Latin-1 further down is not this row's problem
                existing = f.readline().decode("utf-8-sig", "replace")  # a spreadsheet's BOM and CRLF: the same
            if existing.rstrip("\r\n") != header.rstrip("\n"):
                stem, ext = os.path.splitext(path)
                digest = hashlib.sha1(header.encode()).hexdigest()[:8]
                return append_row(f"{stem}.schema{schema_version}-{digest}{ext}", columns, row, schema_version)
            set_aside_partial_line(path)
            text = line
        _write_whole(path, text.encode(), append=True)
    return path


def set_aside_partial_line(path: str) -> None:
    """A crashed writer's partial last row goes to ``<path>.partial``, and ``path`` is cut back to its last whole
    row: left in place, an open quote in it would make the rows after it one cell."""
    with open(path, "rb+") as f:
        data = f.read()
        end = whole_rows_end(data)
        if end == len(data):
            return
        _write_whole(path + ".partial", data[end:] + b"\n", append=True)
        f.truncate(end)
    print(f"warning: {path}: its last row was cut short (a writer died mid-row): moved to {path}.partial",
          file=sys.stderr)


def whole_rows_end(data: bytes) -> int:
    """Where ``data``'s whole rows end: a row ends at a newline outside a quoted cell, as csv reads it. A row left
    open counts only at the end (its last line, or a file without a final newline): an open quote further up, or
    a stray one inside a cell, is a hand edit that leaves the rows after it where they are."""
    last = data[data.rfind(b"\n", 0, len(data) - 1) + 1:]
    if last.endswith(b"\n") and last.count(b'"') % 2 == 0:  # every append's case: no need to read the whole file
        return len(data)
    reader = csv.reader(io.StringIO(data.decode("utf-8", "surrogateescape"), newline=""), strict=True)
    ends = [0]  # the line each row ends on
    try:
        for _ in reader:
            ends.append(reader.line_num)
    except csv.Error as e:
        if str(e) != "unexpected end of data":  # a cell only lenient csv reads: its row and those after are whole
            ends = [0, data.count(b"\n")]
    lines = ends[-1] if data.endswith(b"\n") or ends[-1] <= data.count(b"\n") else ends[-2]  # no final newline
    end = sum(len(part) + 1 for part in data.split(b"\n")[:lines])
    if end < len(data) and data.endswith(b"\n") and data.count(b"\n", end) > 1:
        return len(data)
    return min(end, len(data))


def _write_whole(path: str, data: bytes, append: bool) -> None:
    """Append ``data`` to ``path`` (created if absent) or, not ``append``, write it as a new file, synced to the
    disk; on any failure the file is cut back to its size before (removed if new). Raises the write's OSError."""
    existed = append and os.path.exists(path)
    with open(path, "ab" if append else "wb", buffering=0) as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size if existed else None
        try:
            with whole():  # a stop signal now would cut a written row back out (session 36's CI)
                view = memoryview(data)
                while view:  # os.write may take part of it
                    view = view[os.write(fd, view):]
                os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                if size is not None:
                    os.ftruncate(fd, size)
                else:
                    os.unlink(path)
            raise


def _plain(v):
    """A JSON value, nested ones too: None for NaN, infinities as strings (json's Infinity is not JSON)."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else str(v)
    return v


def write_run_json(directory: str, row: dict, config: dict | None) -> tuple[str | None, str | None]:
    """Write ``<directory>/runs/<run_id>.json``: ``config``, ``row`` and ``vllm`` (vLLM's names with a value; a serve
    run's ``max_concurrency`` and ``request_goodput`` always, null when unbounded or without an SLO, ``failed``, 0 when
    the run is ok, and an ok run's latency keys, null without a sample: ``vllm bench serve --save-result`` writes
    all of them, 0.0 for a latency without a sample). Returns (its path, None), or (None,
    why) when it cannot be written, leaving nothing (the CSV row is the record)."""
    path = os.path.join(directory, "runs", f"{row['run_id']}.json")
    serve = row.get("request_rate") is not None
    always = ("max_concurrency", "request_goodput") if serve else ()
    always += tuple(a for a in VLLM_ALIASES if a.endswith("_ms")) if serve and row.get("status") == "ok" else ()
    vllm = {alias: row.get(col) for alias, col in VLLM_ALIASES.items() if row.get(col) is not None or alias in always}
    if serve:
        vllm["failed"] = 0 if row.get("status") == "ok" else None  # an ok run completed every request
    data = _plain({"config": config, "row": row, "vllm": vllm})
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _write_whole(path + ".tmp", json.dumps(data, indent=1, default=str, allow_nan=False).encode(), append=False)
        os.replace(path + ".tmp", path)
        return path, None
    except OSError as e:
        remove_empty(path + ".tmp")  # gone already (_write_whole): its folder, if this made it
        return None, f"cannot write {path}: {e.strerror or e}"


def new_run_id() -> str:
    """A run's id, given at its start: its row, run file, requests, step log and traces are named by it. 12 hex
    digits with a letter other than e: 1 in 90 draws ("122e20195055") would read as a number in pandas or a sheet."""
    while not set(run_id := uuid.uuid4().hex[:12]) & set("abcdf"):
        pass
    return run_id


def remove_empty(path: str) -> None:
    """Remove ``path`` if it is an empty file, then its folder if empty: a failed run leaves nothing empty."""
    with contextlib.suppress(OSError):
        if not os.path.getsize(path):
            os.remove(path)
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(path))


@contextlib.contextmanager
def open_run_file(path: str | None):
    """``path`` opened to write, its folder created (None: no file, yields None); if the block raises, an empty
    file is removed (``remove_empty``)."""
    if path is None:
        yield None
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with open(path, "w", newline="") as f:
            yield f
    except BaseException:
        remove_empty(path)
        raise


class Results:
    """Where a job's rows go: ``path``; failing that ``<stem>.unwritten-<run_id>.csv`` beside it, else in the system's
    temp directory, else stderr, the why kept in ``problem``. With ``config``, each row also goes to its run JSON."""

    def __init__(self, path: str, columns: list[str], schema_version: int, config: dict | None = None):
        self.path, self.columns, self.schema_version, self.config = path, columns, schema_version, config
        self.run_file: str | None = None  # the run JSON of the latest row
        self.problem: str | None = None
        self.run_ids: set[str] = set()  # of the rows added: a stop after a run's ok row gets a row of its own

    def add(self, row: dict) -> str:
        """Write ``row`` (a copy, stamped; a new run_id if it has none or one added before); returns the file it
        went to ("stderr" when none took it)."""
        run_id = row.get("run_id") if row.get("run_id") not in self.run_ids else None
        row = {**row, "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "run_id": run_id or new_run_id()}
        self.run_ids.add(row["run_id"])
        directory = os.path.dirname(self.path)
        full = {**dict.fromkeys(self.columns), **row}  # every column, as the CSV has it
        self.run_file, lost = write_run_json(directory, full, self.config) if self.config is not None else (None, None)
        if lost:
            self.problem = f"the run file of row {row['run_id']} could not be written"
        try:
            written = append_row(self.path, self.columns, row, self.schema_version)
        except (OSError, TimeoutError, ValueError) as e:  # ValueError: a file csv or UTF-8 cannot read
            return self._fallback(row, f"{type(e).__name__}: {e}" + (f"; {lost}" if lost else ""))
        except KeyboardInterrupt:  # while waiting for the lock: the row is kept, then the stop goes on
            self._fallback(row, "interrupted while waiting for its lock")
            raise
        if lost:
            print(f"error: {lost}", file=sys.stderr)
        if written != self.path:
            print(f"note: {self.path} has another schema's header: this row went to {written} "
                  f"(python -m harness.analyze {directory or '.'} reads both)", file=sys.stderr)
        return written

    def _fallback(self, row: dict, why: str) -> str:
        name = f"{os.path.splitext(os.path.basename(self.path))[0]}.unwritten-{row['run_id']}.csv"
        text = _line(self.columns) + _line([row.get(c) for c in self.columns])
        for directory in (os.path.dirname(os.path.abspath(self.path)), tempfile.gettempdir()):
            target = os.path.join(directory, name)
            try:
                _write_whole(target, text.encode(), append=False)
            except OSError:
                continue
            self.problem = f"cannot write to {self.path} ({why}); the row went to {target}"
            print(f"error: {self.problem}", file=sys.stderr)
            return target
        self.problem = f"cannot write to {self.path} ({why}) nor to a fallback file; the row is printed here"
        print(f"error: {self.problem}\n{text}", file=sys.stderr)
        return "stderr"
