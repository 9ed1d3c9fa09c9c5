"""``python -m harness.analyze --compare OLD NEW``: the regression gate.

Configurations are matched on every configuration column. A metric's median over repeats regresses when it is
worse by more than the threshold AND the repeats' ranges (old [min, max], new [min, max]) do not overlap; worse
by more inside overlapping ranges is listed (``worse?``), never failing. Configurations of OLD that NEW lacks or
has failed rows for (or only failed rows in OLD), and metrics OLD has a value of where NEW has none, are listed
and fail the gate unless ``allow_missing``; those only NEW has are listed, never failing. Comparing nothing
fails. Fewer than 3 repeats on a side, or runs in both files: a warning.
"""

from __future__ import annotations

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
MIN_REPEATS = 3
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


def parse_threshold(text: str) -> float:
    """"10%" or "0.1" -> 0.1. Raises InputError unless it is a percentage >= 0 or a fraction in [0, 1)."""
    percent = text.endswith("%")
    try:
        value = float(text[:-1] if percent else text)
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
    if bad := [m for m in metrics if m not in HIGHER_IS_BETTER + LOWER_IS_BETTER]:
        raise InputError(f"--metrics: {bad[0]} is not comparable; choose from "
                         f"{', '.join(HIGHER_IS_BETTER + LOWER_IS_BETTER)}")
    return metrics


def _changes(where: str, cfg, metrics: list[str], old: tuple, new: tuple, threshold: float) -> int:
    """Print each metric of ``cfg`` that moved beyond ``threshold`` with the repeats' ranges apart (``old``,
    ``new``: median, min, max tables); returns how many got worse."""
    (omed, omin, omax), (nmed, nmin, nmax) = old, new
    worse = 0
    for m in metrics:
        a, b = omed.at[cfg, m], nmed.at[cfg, m]
        if pd.isna(a) or pd.isna(b) or a == 0:
            continue
        change = (b - a) / abs(a)
        better = change if m in HIGHER_IS_BETTER else -change
        apart = nmax.at[cfg, m] < omin.at[cfg, m] or nmin.at[cfg, m] > omax.at[cfg, m]
        ranges = f"old {omin.at[cfg, m]:.4g}-{omax.at[cfg, m]:.4g}, new {nmin.at[cfg, m]:.4g}-{nmax.at[cfg, m]:.4g}"
        if abs(better) > threshold and apart:
            worse += better < 0
            print(f"{'WORSE' if better < 0 else 'better':6} {where}: {m} {a:.4g} -> {b:.4g} ({change:+.1%}; {ranges})")
        elif better < -threshold:  # said, not failed: a noisy machine's ranges can hide a real change
            print(f"worse? {where}: {m} {a:.4g} -> {b:.4g} ({change:+.1%}; {ranges}: the ranges overlap, not gated)")
    return worse


def _missing_or_failed(old: pd.DataFrame, new: pd.DataFrame, keys: list[str], shown: set[str]) -> list[str]:
    """A line per configuration missing from NEW, with no ok row on a side, or with failed repeats in NEW (failures
    of NEW fail the gate: 2 of 3 repeats failed once passed as "nothing missing or failed")."""
    sides = {"OLD": old, "NEW": new}
    runs = {side: Counter(map(tuple, d[keys].values)) for side, d in sides.items()}
    oks = {side: Counter(map(tuple, d[d.status == "ok"][keys].values)) for side, d in sides.items()}
    lines = []
    for cfg in sorted(runs["OLD"] | runs["NEW"], key=str):
        where, n_new, ok_new = _label(keys, cfg, shown), runs["NEW"][cfg], oks["NEW"][cfg]
        if runs["OLD"][cfg] and not n_new:
            lines.append(f"MISSING in NEW: {where}")
        elif not ok_new:
            lines.append(f"FAILED  in NEW (no ok row): {where}")
        elif ok_new < n_new:
            lines.append(f"FAILED  in NEW ({n_new - ok_new} of {n_new} repeats): {where}")
        if runs["OLD"][cfg] and not oks["OLD"][cfg]:
            lines.append(f"FAILED  in OLD (no ok row): {where}")
    return lines


def compare(old: pd.DataFrame, new: pd.DataFrame, keys: list[str], threshold: float, allow_missing: bool = False,
            metrics: list[str] | None = None) -> int:
    """Print every change beyond the gate and every missing or failed configuration of ``old`` and ``new`` (key
    cells filled); returns the exit code (1: the gate fails). ``metrics``: only these (default: all OLD has)."""
    asked, metrics = metrics, [m for m in (metrics or HIGHER_IS_BETTER + LOWER_IS_BETTER) if old[m].notna().any()]
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
    problems = _missing_or_failed(old, new, keys, shown)
    missing_cfgs = len(problems)
    common = sorted(good_old & good_new, key=str)
    groups = [ok.groupby(keys)[metrics] for ok in (ok_old, ok_new)]
    (omed, omin, omax, on), (nmed, nmin, nmax, nn) = ((g.median(), g.min(), g.max(), g.size()) for g in groups)
    # a metric OLD has and NEW lacks (a column gone, cells damaged) cannot pass unseen: it is not compared
    problems += [f"NO VALUE in NEW: {m} of {_label(keys, cfg, shown)}" for cfg in common for m in metrics
                 if pd.notna(omed.at[cfg, m]) and pd.isna(nmed.at[cfg, m])]
    problems += [f"NO VALUE in OLD: {m} (asked with --metrics)" for m in asked or [] if m not in metrics]
    for line in problems:
        print(line)
    for cfg in sorted(cfg_new - cfg_old, key=str):
        print(f"NEW only (nothing to compare with): {_label(keys, cfg, shown)}")
    if few := [c for c in common if min(on.loc[c], nn.loc[c]) < MIN_REPEATS]:
        print(f"warning: {len(few)} of {len(common)} configuration(s) have fewer than {MIN_REPEATS} repeats on a "
              f"side:\n  their ranges say little about the spread, so small regressions can pass unseen")
    if not asked and any(gated(keys, c, metrics, False) != metrics for c in common):
        print("serve rows: ctrl_calls and ctrl_bytes_mean are not gated (the steps depend on the arrivals), nor "
              "ideal's TTFT, E2EL, throughput and goodput (its recording's admissions); --metrics gates them")
    worse = sum(_changes(_label(keys, cfg, shown), cfg, gated(keys, cfg, metrics, bool(asked)), (omed, omin, omax),
                         (nmed, nmin, nmax), threshold) for cfg in common)
    values = len(problems) - missing_cfgs
    missing = " and ".join([f"{missing_cfgs} configuration(s) missing or failed"] * bool(missing_cfgs)
                           + [f"{values} metric value(s) missing"] * bool(values))
    print(f"{len(common)} configuration(s) compared, {worse} regression(s) beyond {threshold * 100:g}% and outside the "
          f"repeats' ranges; {missing or 'nothing missing or failed'}")
    reasons = [f"{worse} regression(s)"] * bool(worse)
    if problems and not allow_missing:
        reasons.append(f"{missing} on a side, listed above (--allow-missing lists them without failing)")
    fails = " and ".join(reasons) if common else "no configuration has ok rows in both files, so nothing was compared"
    print(f"the gate fails: {fails}" if fails else "the gate passes")
    return 1 if fails else 0
