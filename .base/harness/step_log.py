"""Per-step timings of a timed run (``step_log=true``), ``<results_dir>/steps/<run_id>.csv``; ``python -m
harness.step_log FILE...`` sums a file up. Columns, a line per engine step (us; empty where not measured: replayed
``ideal`` steps have no message, tp=1 no worker): ``step``, ``prefill`` (0/1), ``num_seqs``, ``num_tokens``,
``duration_us`` (previous step's tokens to this one's), ``message_bytes``, ``send_us`` (rank 0 serialising and
writing the message); from the start of the send: ``r0_launch_us`` (rank 0's ``run()`` returned), per worker rank K
``rK_oneway_us`` (it received the message) and ``rK_launch_us`` (its ``run()`` returned). How launch lag splits:
docs/METHOD.md."""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys

import numpy as np

from common import first_line

from .results_csv import open_run_file

COLUMNS = ["step", "prefill", "num_seqs", "num_tokens", "duration_us", "message_bytes", "send_us", "r0_launch_us"]


class NotStepLog(ValueError):
    """A path that is no step log: no file, a directory, or a CSV file of another kind (its header says which)."""


def write_step_log(path: str, steps, stats: dict) -> None:
    """Write ``path`` (its folder created) from ``StepRecord``s and ``LLM.collect_control_stats()``. Raises OSError."""
    recv = stats.get("recv") or {}
    ranks = sorted(recv)

    def us(values, i):
        return f"{values[i] / 1e3:.1f}" if values is not None and i < len(values) else ""

    with open_run_file(path) as f:
        out = csv.writer(f)
        out.writerow(COLUMNS + [f"r{r}_{k}" for r in ranks for k in ("oneway_us", "launch_us")])
        for i, s in enumerate(steps):
            line = [i, int(s.is_prefill), s.num_seqs, s.num_tokens, f"{s.duration_s * 1e6:.1f}", s.message_bytes,
                    f"{s.send_ns / 1e3:.1f}", "" if s.launch_ns is None else f"{s.launch_ns / 1e3:.1f}"]
            out.writerow(line + [us(recv[r].get(key), i) for r in ranks for key in ("ns", "launch_ns")])


def summarize(path: str) -> str:
    """Over the decode steps of step log ``path``: the latest worker's launch lag (mean, p50, p99, and the
    mean of its late part) and its three parts, means in us, and the share of steps late by more than
    50 us; a line saying what is missing where the file lacks worker columns."""
    import pandas as pd

    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text and not text.endswith("\n"):  # a writer that died mid-line
        print(f"warning: {path}: ignored its truncated last line", file=sys.stderr)
        text = text[:text.rfind("\n") + 1]
    rows = list(csv.reader(io.StringIO(text)))
    if rows and rows[0][:len(COLUMNS)] != COLUMNS:
        raise NotStepLog("a results CSV, not a step log (python -m harness.analyze reads it)" if "run_id" in rows[0]
                       else f"not a step log: its header does not start {','.join(COLUMNS[:3])},...")
    if short := next((i + 1 for i, r in enumerate(rows) if r and len(r) != len(rows[0])), None):
        raise ValueError(f"line {short} has {len(rows[short - 1])} cells, the header {len(rows[0])}")
    df = pd.read_csv(io.StringIO(text))
    decode = df[df.prefill == 0]
    ranks = sorted({c.split("_")[0] for c in df.columns if c.endswith("_launch_us") and c != "r0_launch_us"})
    launch = decode[[f"{r}_launch_us" for r in ranks]].to_numpy(dtype=float)
    if np.isnan(launch).all():  # also no decode step, or no worker column
        return f"{path}: {len(decode)} decode steps; no worker launch samples (tp=1 or control=ideal)"
    latest = np.nanargmax(launch, axis=1)
    rows = np.arange(len(decode))
    oneway = decode[[f"{r}_oneway_us" for r in ranks]].to_numpy(dtype=float)[rows, latest]
    lag = launch[rows, latest] - decode.r0_launch_us.to_numpy(dtype=float)
    prep = launch[rows, latest] - oneway
    return (f"{path}: {len(decode)} decode steps, step p50 {decode.duration_us.median():.0f} us; latest worker's "
            f"launch lag mean {lag.mean():+.1f} p50 {np.median(lag):+.1f} p99 {np.percentile(lag, 99):+.1f}, "
            f"late mean {np.maximum(lag, 0).mean():.1f} us, {100 * (lag > 50).mean():.1f}% of steps > 50 us late"
            f"\n  = one-way {oneway.mean():.1f} + worker's preparation {prep.mean():.1f} - rank 0's send to "
            f"launch {decode.r0_launch_us.mean():.1f} (means, us; on CPU a rank 'launches' when its step has "
            f"computed, so preparation holds the whole step)")


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.step_log FILE...``: ``summarize`` each; exit 2 if any is not a readable step log."""
    p = argparse.ArgumentParser(prog="python -m harness.step_log", description=summarize.__doc__)
    p.add_argument("files", nargs="+", help="step logs (<results_dir>/steps/<run_id>.csv)")
    code = 0
    for path in p.parse_args(argv).files:
        try:
            if not os.path.isfile(path):
                raise NotStepLog("a directory" if os.path.isdir(path) else "no such file")
            print(summarize(path))
        except NotStepLog as e:
            print(f"error: {path}: {e}", file=sys.stderr)
            code = 2
        except Exception as e:  # empty, another kind of CSV, binary: pandas and numpy raise many types
            print(f"error: {path}: not a readable step log ({type(e).__name__}: {first_line(e)})", file=sys.stderr)
            code = 2
    return code


if __name__ == "__main__":
    sys.exit(main())
