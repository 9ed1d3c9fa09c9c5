"""``python -m harness.analyze --compare OLD NEW``: the regression gate.

Configurations are matched on every configuration column. A metric's median over repeats regresses when it is
worse by more than the threshold AND the two sides' spreads do not overlap: a side's [min, max] over up to 4
repeats, its middle half (25th to 75th percentile) from 5, which one outlier does not widen. Worse by more with
overlapping spreads is listed (``worse?``), never failing. Configurations of OLD that NEW lacks or has failed rows
for (or only failed rows in OLD), metrics one side has a value of where the other has none, and lines lost from a
file (damaged, truncated) are listed and fail the gate unless ``allow_missing``; configurations only NEW has are
listed, never failing. Comparing nothing fails. Fewer than 3 repeats on a side, runs in both files, rows of several
commits on a side: a warning.
"""

from __future__ import annotations

import difflib
import textwrap
from collections import Counter

import numpy as np
import pandas as pd

from .load_results import InputError
from .plot_common import key_cell

HIGHER_IS_BETTER = ["output_tok_s", "total_tok_s", "req_s", "goodput_req_s"]
LOWER_IS_BETTER = ["ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99", "itl_ms_p50", "itl_ms_p99",
                   "e2el_ms_p50", "e2el_ms_p99", "decode_step_ms_p50", "ctrl_oneway_us_p50", "ctrl_oneway_us_p99",
                   "ctrl_bytes_mean", "ctrl_calls"]
COMPARABLE = HIGHER_IS_BETTER + LOWER_IS_BETTER
MIN_REPEATS = 3
MIDDLE_HALF_FROM = 5  # repeats: from here a side's spread is its 25th-75th percentile, not [min, max]
DETERMINISTIC = {"ctrl_bytes_mean", "ctrl_calls"}  # the same in every repeat: no spread to warn about
# the columns that say where and with what a row ran: the gate notes where OLD and NEW differ
PROVENANCE = ["host", "cpu_model", "cpu_cores", "gpu_name", "driver_version", "cuda_version", "torch_version",
              "triton_version", "transformers_version", "python_version"]
# workload=serve rows, unless --metrics names them: how many steps ran (so messages and their mean size) depends
# on when requests arrived
SERVE_UNGATED = {"ctrl_calls", "ctrl_bytes_mean"}
# ideal's serve metrics that follow its recording's admissions (tp > 1), no floor (docs/SERVE.md): not gated, and in
# parentheses in the serve table; its step and TPOT are what to compare
IDEAL_FOLLOWS_RECORDING = {*HIGHER_IS_BETTER, "achieved_rate_req_s", "ttft_ms_p50", "ttft_ms_p99", "e2el_ms_p50",
                           "e2el_ms_p99", "queue_ms_p99"}


def gated(keys: list[str], cfg: tuple, metrics: list[str], asked: bool) -> list[str]:
    """The ``metrics`` the gate judges at configuration ``cfg``: all when ``asked``, else not the SERVE_UNGATED ones
    of a serve row, nor IDEAL_FOLLOWS_RECORDING of ideal's."""
    row = dict(zip(keys, cfg))
    if asked or row.get("request_rate", "-") == "-":
        return metrics
    skip = SERVE_UNGATED | (IDEAL_FOLLOWS_RECORDING if row.get("control") == "ideal" else set())
    return [m for m in metrics if m not in skip]


def _label(keys: list[str], cfg: tuple, shown: set[str]) -> str:
    """``key=value, ...`` of a configuration: its non-empty cells of the ``shown`` keys."""
    return ", ".join(f"{k}={key_cell(v)}" for k, v in zip(keys, cfg) if v != "-" and k in shown)  # 4, not 4.0


def provenance_notes(old: pd.DataFrame, new: pd.DataFrame) -> list[str]:
    """Warnings: a side whose ok rows come from several commits (pooled as repeats), and the machine and software
    columns whose values differ between the sides (pytest-benchmark warns likewise)."""
    notes = []
    for side, df in (("OLD", old), ("NEW", new)):
        if (commits := df[df.status == "ok"].git_commit.dropna().unique()).size > 1:
            notes.append(f"warning: {side} holds ok rows of {commits.size} commits ({', '.join(map(str, commits[:4]))})"
                         f": their repeats are pooled; keep one commit's rows in a file to compare it")
    values = [{c: ", ".join(sorted(map(str, d[d.status == "ok"][c].dropna().unique()))) or "(none)" for c in PROVENANCE}
              for d in (old, new)]
    if differ := [f"{c} {values[0][c]} -> {values[1][c]}" for c in PROVENANCE if values[0][c] != values[1][c]]:
        notes.append(f"note: OLD and NEW ran on other machines or software: {'; '.join(differ)}")
    return notes


def spreads(group, metrics: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(low, high) per configuration and metric of ``group`` (a groupby): [min, max] of up to 4 repeats, the 25th
    and 75th percentiles (numpy's linear) of ``MIDDLE_HALF_FROM`` or more; [min, max] always for a DETERMINISTIC
    count, where one repeat that moved is a change."""
    count = group.count()
    wide = (count >= MIDDLE_HALF_FROM) & ~count.columns.isin(list(DETERMINISTIC))
    return (group.min().mask(wide, group.quantile(0.25)[metrics]),
            group.max().mask(wide, group.quantile(0.75)[metrics]))


def parse_threshold(text: str) -> float:
    """"10%" or "0.1" -> 0.1. Raises InputError unless it is a percentage >= 0 or a fraction in [0, 1)."""
    percent = text.endswith("%")
    try:
        value = float(text[:-1] if percent else text) + 0.0  # + 0.0: "-0" is 0, not "beyond -0%"
        if "_" in text:  # float() takes "1_0" as 10
            raise ValueError
    except ValueError:
        raise InputError(f"--threshold must be a percentage like 10% or a fraction like 0.1, got {text!r}") from None
    if not np.isfinite(value) or value < 0:
        raise InputError(f"--threshold must be a finite number >= 0, got {text!r}")
    if not percent and value >= 1:  # "1" is more likely 1% than 100%: ask
        raise InputError(f"--threshold {text} is not a fraction in [0, 1); for a percentage write {text}%")
    return value / 100 if percent else value


def parse_metrics(given: list[str] | None) -> list[str] | None:
    """``--metrics`` as given, names apart by spaces or commas (vLLM's ``--percentile-metrics ttft,tpot``): the
    names, each once, or None. Raises InputError: no name, or a name the gate cannot compare."""
    if given is None:
        return None
    metrics = list(dict.fromkeys(m.strip() for arg in given for m in arg.split(",") if m.strip()))  # once each
    if not metrics:
        raise InputError("--metrics: give at least one metric name")
    if bad := [m for m in metrics if m not in COMPARABLE]:
        if near := difflib.get_close_matches(bad[0], COMPARABLE, n=1, cutoff=0.6):
            raise InputError(f"--metrics: {bad[0]} is not comparable (did you mean {near[0]}?)")
        raise InputError(f"--metrics: {bad[0]} is not comparable; choose from {', '.join(COMPARABLE)}")
    return metrics


def _changes(where: str, cfg, metrics: list[str], old: tuple, new: tuple, threshold: float) -> int:
    """Print each metric of ``cfg`` that moved beyond ``threshold`` with the sides' spreads apart (``old``, ``new``:
    median, low, high tables: ``spreads``), and each DETERMINISTIC count whose lowest or highest repeat moved, either
    way; returns how many got worse or changed."""
    (omed, omin, omax), (nmed, nmin, nmax) = old, new
    worse = 0
    for m in metrics:
        a, b = omed.at[cfg, m], nmed.at[cfg, m]
        if pd.isna(a) or pd.isna(b):
            continue
        if m in DETERMINISTIC:  # the same in every repeat: one repeat that moved is a change, either way, from 0 too
            was, now = (omin.at[cfg, m], omax.at[cfg, m]), (nmin.at[cfg, m], nmax.at[cfg, m])
            if max(abs(now[0] - was[0]), abs(now[1] - was[1])) > threshold * abs(a):
                worse += 1
                print(f"CHANGED {where}: {m} {'-'.join(f'{v:.6g}' for v in dict.fromkeys(was))} -> "
                      f"{'-'.join(f'{v:.6g}' for v in dict.fromkeys(now))} (a count the same in every repeat; an "
                      f"intended change needs a new baseline: docs/USAGE.md)")
            continue
        if a == 0:
            continue
        change = (b - a) / abs(a)
        better = change if m in HIGHER_IS_BETTER else -change
        apart = nmax.at[cfg, m] < omin.at[cfg, m] or nmin.at[cfg, m] > omax.at[cfg, m]
        ranges = f"old {omin.at[cfg, m]:.4g}-{omax.at[cfg, m]:.4g}, new {nmin.at[cfg, m]:.4g}-{nmax.at[cfg, m]:.4g}"
        if abs(better) > threshold and apart:
            worse += better < 0
            print(f"{'WORSE' if better < 0 else 'better':6} {where}: {m} {a:.4g} -> {b:.4g} ({change:+.1%}; {ranges})")
        elif better < -threshold:  # said, not failed: a noisy machine's ranges can hide a real change
            print(f"worse? {where}: {m} {a:.4g} -> {b:.4g} ({change:+.1%}; {ranges}: the spreads overlap, not gated)")
    return worse


def _missing_or_failed(old: pd.DataFrame, new: pd.DataFrame, keys: list[str], shown: set[str]) -> list[str]:
    """A line per configuration missing from NEW, with no ok row on a side, or with failed repeats in NEW (failures
    of NEW fail the gate: 2 of 3 repeats failed once passed as "nothing missing or failed")."""
    runs_old, runs_new, oks_old, oks_new = (Counter(map(tuple, d[keys].values))
                                            for d in (old, new, old[old.status == "ok"], new[new.status == "ok"]))
    lines = []
    for cfg in sorted(runs_old | runs_new, key=str):  # one line a configuration: the summary counts lines
        n_new, ok_new = runs_new[cfg], oks_new[cfg]
        said = (["MISSING in NEW"] if runs_old[cfg] and not n_new else ["FAILED  in NEW (no ok row)"] if not ok_new
                else [f"FAILED  in NEW ({n_new - ok_new} of {n_new} repeats)"] if ok_new < n_new else [])
        if runs_old[cfg] and not oks_old[cfg]:
            said.append("failed in OLD (no ok row)" if said else "FAILED  in OLD (no ok row)")
        if said:
            lines.append(f"{', '.join(said)}: {_label(keys, cfg, shown)}")
    return lines


def _no_value(keys, common, metrics, asked, shown, med) -> list[str]:
    """A line per metric one side has a value of and the other lacks at a configuration both have (a column gone,
    cells damaged): it cannot pass unseen; and per metric ``asked`` that OLD has no value of anywhere."""
    (omed, nmed), lines = med, []
    for cfg in common:
        for m in metrics:
            if pd.isna(omed.at[cfg, m]) != pd.isna(nmed.at[cfg, m]):
                lines.append(f"NO VALUE in {'NEW' if pd.isna(nmed.at[cfg, m]) else 'OLD'}: {m} of "
                             f"{_label(keys, cfg, shown)}")
    return lines + [f"NO VALUE in OLD: {m} (asked with --metrics)" for m in asked or [] if m not in metrics]


def compare(old: pd.DataFrame, new: pd.DataFrame, keys: list[str], threshold: float, allow_missing: bool,
            metrics: list[str] | None, damaged: dict[str, list[str]]) -> int:
    """Print every change beyond the gate and every missing or failed configuration of ``old`` and ``new`` (key
    cells filled); returns the exit code (1: the gate fails). ``metrics``: only these (default: all OLD has);
    ``damaged``: {"OLD" or "NEW": the lines lost from its file (``load_results.load``)}."""
    asked, metrics = metrics, [m for m in (metrics or COMPARABLE) if old[m].notna().any()]
    ok_old, ok_new = old[old.status == "ok"], new[new.status == "ok"]
    cfg_old, cfg_new, good_old, good_new = (set(map(tuple, d[keys].values)) for d in (old, new, ok_old, ok_new))
    every = cfg_old | cfg_new
    if shared := len(set(old.run_id.dropna()) & set(new.run_id.dropna())):  # run_id: one per timed run
        print(f"warning: OLD and NEW hold {shared} of the same runs (run_id): one file compared with itself?")
    # each line names the keys whose value differs, and control and tp; the others are said once
    shown = {k for i, k in enumerate(keys) if len({c[i] for c in every}) > 1} | {"control", "tp"}
    if every and set(keys) - shown:
        print(textwrap.fill(f"every configuration: {_label(keys, next(iter(every)), set(keys) - shown)}", 110,
                            subsequent_indent="  "))
    counts = {"file(s) with lines lost": [f"DAMAGED {side}: {line}" for side, lines in damaged.items()
                                          for line in lines],
              "configuration(s) missing or failed": _missing_or_failed(old, new, keys, shown)}
    common = sorted(good_old & good_new, key=str)
    groups = [ok.groupby(keys)[metrics] for ok in (ok_old, ok_new)]
    (omed, on), (nmed, nn) = ((g.median(), g.size()) for g in groups)
    counts["metric value(s) missing"] = _no_value(keys, common, metrics, asked, shown, (omed, nmed))
    for line in (problems := [line for lines in counts.values() for line in lines]):
        print(line)
    for cfg in sorted(cfg_new - cfg_old, key=str):
        print(f"NEW only (nothing to compare with): {_label(keys, cfg, shown)}")
    few = [c for c in common if min(on.loc[c], nn.loc[c]) < MIN_REPEATS]
    if few and set(metrics) - DETERMINISTIC:
        print(f"warning: {len(few)} of {len(common)} configuration(s) have fewer than {MIN_REPEATS} repeats on a "
              f"side:\n  their ranges say little about the spread, so small regressions can pass unseen")
    if not asked and any(gated(keys, c, metrics, False) != metrics for c in common):
        print("serve rows: ctrl_calls and ctrl_bytes_mean are not gated (the steps depend on the arrivals), nor "
              "ideal's TTFT, E2EL, throughput and goodput (its recording's admissions); --metrics gates them")
    (olo, ohi), (nlo, nhi) = (spreads(g, metrics) for g in groups)
    worse = sum(_changes(_label(keys, cfg, shown), cfg, gated(keys, cfg, metrics, bool(asked)), (omed, olo, ohi),
                         (nmed, nlo, nhi), threshold) for cfg in common)
    missing = " and ".join(f"{len(lines)} {what}" for what, lines in counts.items() if lines)
    print(f"{len(common)} configuration(s) compared, {worse} regression(s) beyond {threshold * 100:g}% with the "
          f"spreads apart; {missing or 'nothing missing or failed'}")
    reasons = [f"{worse} regression(s)"] * bool(worse)
    if problems and not allow_missing:
        reasons.append(f"{missing} on a side, listed above (--allow-missing lists them without failing)")
    fails = " and ".join(reasons) if common else "no configuration has ok rows in both files, so nothing was compared"
    print(f"the gate fails: {fails}" if fails else "the gate passes")
    return 1 if fails else 0
