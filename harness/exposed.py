"""What a control plane costs: its decode step and TPOT beside ``control=ideal``'s (the same engine, no transport).

exposed = median over repeats of the plane's metric - median of ideal's (us, and % of ideal's); the spread,
[plane min - ideal max, plane max - ideal min], holding 0 is "within noise" (docs/METHOD.md, "exposed cost").
"""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd

from .plot_common import config_groups, key_cell
from .text_tables import fitting_sections, header_lines, num4

EXPOSED_METRICS = [("decode_step_ms_p50", "decode step p50"), ("tpot_ms_p50", "TPOT p50")]
# numbers beside the metrics (a serve row's achieved rate, a decode batch's parts, send + late), empty where absent
AUX = ["achieved_rate_req_s", "output_tokens", "num_requests", "decode_steps", "ctrl_send_us_p50",
       "ctrl_launch_late_us_mean"]


def why_no_exposed_cost(ok: pd.DataFrame) -> str:
    """Why the ok engine rows ``ok`` give no ``exposed_cost``, in words."""
    if (ok.tp == 1).all():
        return "at tp=1 no plane sends, so nothing is exposed"
    if ok[[m for m, _ in EXPOSED_METRICS]].isna().all(axis=None):
        return "the rows hold no decode step or TPOT"
    return "it needs control=ideal rows in the same configuration as the planes'"


def exposed_cost(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """A row per (configuration with ideal rows, other plane, metric) of the ok rows ``df`` (key cells filled): the
    ``keys`` but control, then the columns below (``*_sent_req_s``: the achieved rates' medians)."""
    others = [k for k in keys if k != "control"]
    out = []
    df = df[pd.to_numeric(df.tp, errors="coerce") != 1]  # rank 0 alone: no plane sends, none has a cost
    df = df.reindex(columns=[*df.columns, *(c for c in ["overrides", *AUX] if c not in df)])  # absent: empty
    df[AUX] = df[AUX].apply(pd.to_numeric, errors="coerce")
    for cfg, rows in config_groups(_options_to_plane(df), others):
        ideal = rows[rows.control == "ideal"]
        if ideal.empty:
            continue
        for control, plane in rows[rows.control != "ideal"].groupby("control"):
            late = plane.ctrl_send_us_p50 + plane.ctrl_launch_late_us_mean  # per repeat, NaN where either is missing
            for metric, label in EXPOSED_METRICS:
                i, p = ideal[metric].dropna(), plane[metric].dropna()
                if i.empty or p.empty:
                    continue
                diff_us = (p.median() - i.median()) * 1e3
                low, high = (p.min() - i.max()) * 1e3, (p.max() - i.min()) * 1e3
                verdict = ("one repeat: no spread" if min(len(p), len(i)) < 2 else "within noise" if low <= 0 <= high
                           else "costs" if diff_us > 0 else "ideal no floor")  # a plane cannot beat no transport
                out.append({**dict(zip(others, cfg)), "control": control, "metric": label,
                            "ideal_ms": i.median(), "plane_ms": p.median(), "exposed_us": diff_us,
                            "exposed_pct": 100 * diff_us / 1e3 / i.median(), "low_us": low, "high_us": high,
                            "repeats": f"{len(p)}/{len(i)}", "verdict": verdict,
                            "send_late_us": float(late.median()),
                            "ideal_sent_req_s": ideal.achieved_rate_req_s.median(),
                            "plane_sent_req_s": plane.achieved_rate_req_s.median(),
                            "ideal_batch": mean_batch(ideal), "plane_batch": mean_batch(plane)})
    return pd.DataFrame(out)


def mean_batch(rows: pd.DataFrame) -> float:
    """The median over ``rows`` of the sequences a decode step ran on average: (output_tokens - num_requests) /
    decode_steps (each request's first token comes from its prefill); NaN without those columns."""
    return ((rows.output_tokens - rows.num_requests) / rows.decode_steps.where(rows.decode_steps > 0)).median()


def ideal_apart(table: pd.DataFrame) -> pd.Series:
    """Per row of ``exposed_cost``'s ``table``: whether ideal sent more than 10% off the plane's rate or ran decode
    batches more than 10% off the plane's mean (then its step is no floor: a step's time grows with its batch)."""
    return (((table.ideal_sent_req_s / table.plane_sent_req_s - 1).abs() > 0.1)
            | ((table.ideal_batch / table.plane_batch - 1).abs() > 0.1))


def _options_to_plane(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``control.options.*`` moved from ``overrides`` into ``control`` (``ring control.options.spin_us=0``):
    a variant of the plane, so ideal's rows pair with every plane's; ideal's options only say how it recorded."""
    items = [str(t).split() if isinstance(t, str) and t != "-" else [] for t in df.overrides]
    options = [" ".join(i for i in row if i.startswith("control.options.")) for row in items]
    control = [c if c == "ideal" or not o else f"{c} {o}" for c, o in zip(df.control, options)]
    rest = [" ".join(i for i in row if not i.startswith("control.options.")) or "-" for row in items]
    return df.assign(overrides=rest, control=control)


LEGEND = ("exposed cost (tp > 1): the plane's median minus control=ideal's (same engine, no transport), us and % "
          "of ideal's; spread = [plane min - ideal max, plane max - ideal min] over repeats, \"within noise\" where "
          "it holds 0; step, TPOT: decode step p50, TPOT p50; send+late = the plane's send p50 + its workers' launch "
          "late mean (us), what rank 0 spends sending and waits for a worker that launched after it (on CPU the late "
          "mean is only the gap after the last collective)")
OPTIONAL = ["spread", "send+late"]  # the text table's columns left out, the last first, where it would not fit


def print_exposed(table: pd.DataFrame, fmt: str = "text") -> None:
    """The exposed-cost table, if any: ``text`` in at most 120 columns, ``markdown`` every column."""
    if table.empty:
        return
    if fmt == "markdown":
        return _print_full(table)
    others = list(table.columns[:list(table.columns).index("control")])
    row_keys = [k for k in others if k in ("tp", "request_rate")]

    def row(r: pd.Series, rows: pd.DataFrame, shown: list[str]) -> dict:  # shown: those of OPTIONAL that fit
        one = r.verdict.startswith("one repeat")
        out = {"rate" if k == "request_rate" else k: key_cell(r[k]) for k in row_keys}
        out.update({"control": r.control.replace("control.options.", ""), "metric": r.metric.split()[-2],
                    "ideal ms": num4(r.ideal_ms), "exposed us": _signed(r.exposed_us), "%": _signed(r.exposed_pct)})
        if "spread" in shown:  # none from one repeat
            out["spread"] = "" if one else f"[{_signed(r.low_us)}, {_signed(r.high_us)}]"
        out["verdict"] = "one repeat" if one else r.verdict
        if "send+late" in shown and rows.send_late_us.notna().any():  # only in the sections that have it
            out["send+late"] = "" if r.send_late_us != r.send_late_us else f"{r.send_late_us:.0f}"
        return out

    optional = OPTIONAL if table.send_late_us.notna().any() else OPTIONAL[:1]
    lines, left_out, common = fitting_sections(table, [k for k in others if k not in row_keys], row, optional, keep=0)
    note = f" (left out to fit: {', '.join(left_out)}; all: --format markdown)" if left_out else ""
    print("\n" + "\n".join(header_lines(LEGEND + note, common) + lines + sent_apart(table)))


def sent_apart(table: pd.DataFrame) -> list[str]:
    """A note per serve configuration where ``ideal_apart``: ideal admits each request at its recording's launch,
    ahead of the trace when the timed pass runs faster (docs/SERVE.md), later when it runs slower or its slots
    (``max_concurrency``) free later; either way its batches differ from the plane's."""
    keys = list(table.columns[:list(table.columns).index("control")])
    far = table[ideal_apart(table)].drop_duplicates([*keys, "control"])  # one note per plane, not per metric
    lines = []
    for _, r in far.iterrows():
        where = ", ".join(f"{k}={key_cell(r[k])}" for k in keys)
        sent = f"sent {r.ideal_sent_req_s:.2f} req/s beside {r.control}'s {r.plane_sent_req_s:.2f}"
        ran = f"ran decode batches of {r.ideal_batch:.2f} sequences on average beside {r.control}'s {r.plane_batch:.2f}"
        sent_off = abs(r.ideal_sent_req_s / r.plane_sent_req_s - 1) > 0.1
        why = ("it admitted requests ahead of the trace, so its batches were larger" if sent_off and
               r.ideal_sent_req_s > r.plane_sent_req_s else "its requests went in later (at its recording's "
               "launches, or as its slots freed), so its batches differ" if sent_off else
               "its requests went in at its recording's launches, not as they arrived")
        said = " and ".join([sent] * sent_off + [ran] * (abs(r.ideal_batch / r.plane_batch - 1) > 0.1))
        lines += textwrap.wrap(f"note: {where + ': ' if where else ''}ideal {said}: {why} and its step is no floor "
                               f"here", 110, subsequent_indent="  ")
    return lines


def _signed(value: float) -> str:
    """+31.2, -0.4, +2565: one decimal below 100."""
    return f"{value:+.1f}" if abs(value) < 99.95 else f"{value:+.0f}"


def _print_full(table: pd.DataFrame) -> None:
    """The exposed-cost table as markdown, every column."""
    shown = table.copy()
    for col in shown.columns[:list(shown.columns).index("control")]:  # the configuration: 4, inf (not 4.0)
        shown[col] = shown[col].map(key_cell)
    for col, spec in (("ideal_ms", ".3f"), ("plane_ms", ".3f"), ("exposed_us", "+.1f"), ("exposed_pct", "+.2f")):
        shown[col] = shown[col].map(lambda v, s=spec: format(v, s))
    shown["spread_us"] = [f"[{lo:+.1f}, {hi:+.1f}]" for lo, hi in zip(table.low_us, table.high_us)]
    shown["send_late_us"] = table.send_late_us.map(lambda v: "" if v != v else f"{v:.0f}")
    shown = shown.drop(columns=["low_us", "high_us", "ideal_sent_req_s", "plane_sent_req_s", "ideal_batch",
                                "plane_batch"])
    print("\n" + LEGEND.replace("send+late", "send_late_us").replace("step, TPOT: decode step p50, TPOT p50; ", ""))
    print(shown.replace({np.nan: ""}).to_markdown(index=False, disable_numparse=True))  # keep the signs
    if notes := sent_apart(table):
        print("\n".join(notes))
