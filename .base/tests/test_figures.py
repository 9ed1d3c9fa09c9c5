"""python -m harness.analyze --plot: which figures each kind of sweep gets, where they go, their panels and
labels (engine sweep with and without control=ideal, broadcast, serve rate sweep, all at once). Rows are made
here; the Figures are caught as matplotlib closes them."""

from __future__ import annotations

import re

import matplotlib
import pandas as pd
import pytest

from harness.analyze import main
from harness.plot_common import cell, config_labels, plane_colours, repeats_text, side_path
from harness.schema import COLUMNS, SCHEMA_VERSION

matplotlib.use("Agg")
BASE = {"schema_version": SCHEMA_VERSION, "status": "ok", "engine": "tp", "model": "qwen3-tiny", "device": "cpu",
        "dtype": "float32", "seed": 0}
STEP = {"ideal": 30.0, "shm": 30.2, "ring": 33.0, "pipe": 31.0}  # ms: shm within noise, ring costs


def engine_rows(controls=("ideal", "shm", "ring"), workloads=("latency", "bench"), repeats=2, tp=2) -> list:
    """Rows of ``-m control=... workload=... repeat=N``; decode step STEP[control] +-0.5 ms over repeats."""
    rows = []
    for control in controls:
        for workload in workloads:
            for r in range(repeats):
                step = STEP[control] + (r - 0.5) * (1.0 if control != "ring" else 0.2)
                rows.append({**BASE, "control": control, "tp": tp, "workload": workload, "cpu_threads": 1.0,
                             "repeat": r, "all_reduce": "gloo", "output_tok_s": 1000 / step,
                             "tpot_ms_p50": step + 1, "tpot_ms_p99": step + 5, "decode_step_ms_p50": step,
                             "decode_step_ms_p99": step + 4,
                             "ctrl_oneway_us_p50": None if control == "ideal" else 90.0,
                             "ctrl_oneway_us_p99": None if control == "ideal" else 400.0})
    return rows


def broadcast_rows(controls=("shm", "pipe", "ring"), tps=(2, 4), repeats=2) -> list:
    """Rows of ``-m workload=broadcast control=... tp=...``: one per control, tp, payload and repeat."""
    payloads = {"decode-1": 89, "decode-8": 316, "raw-256B": 293, "raw-65536B": 65582, "raw-1048576B": 1048622}
    return [{**BASE, "model": None, "dtype": None, "control": c, "tp": tp, "workload": "broadcast", "payload": p,
             "payload_bytes": size, "repeat": r, "ctrl_oneway_us_p50": 50 + size / 1e3 + 10 * r,
             "ctrl_oneway_us_p99": 300 + size / 1e2}
            for c in controls for tp in tps for p, size in payloads.items() for r in range(repeats)]


def serve_rows(controls=("ideal", "shm"), rates=(4.0, 16.0, float("inf")), repeats=2) -> list:
    """Rows of a workload=serve rate sweep (as tests/test_analyze_serve.py makes them, smaller)."""
    rows = []
    for control in controls:
        for rate in rates:
            for r in range(repeats):
                step = 20 + r + (0.5 if control == "shm" else 0)
                done = min(rate, 12.0)
                rows.append({**BASE, "control": control, "tp": 2, "workload": "serve", "request_rate": rate,
                             "burstiness": 1.0, "repeat": r, "req_s": done, "output_tok_s": 40 * done,
                             "achieved_rate_req_s": rate * 0.95 if rate != float("inf") else None,
                             "ttft_ms_p50": 50.0 + done, "ttft_ms_p99": 300.0, "tpot_ms_p50": step,
                             "tpot_ms_p99": 1.5 * step, "decode_step_ms_p50": step - 1})
    return rows


def write(rows: list, path) -> str:
    pd.DataFrame(rows).reindex(columns=COLUMNS).to_csv(path, index=False)
    return str(path)


@pytest.fixture
def figures(monkeypatch):
    """The Figures drawn, in order, caught as they are closed."""
    import matplotlib.pyplot as plt

    caught, every, close = [], [], plt.close
    monkeypatch.setattr(plt, "close", lambda fig: caught.append(fig) or every.append(fig))
    yield caught
    for fig in every:  # closed for good (pyplot keeps every figure it made until then)
        close(fig)


def plot(rows: list, tmp_path, capsys) -> tuple[str, list[str]]:
    """Run --plot on ``rows``: (the figure's path, the lines printed about figures)."""
    out = str(tmp_path / "fig.png")
    assert main([write(rows, tmp_path / "runs.csv"), "--plot", out]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "figure" in line or "plot" in line]
    return out, lines


def titles(fig) -> list[str]:
    return [ax.get_title() for ax in fig.axes]


def all_text(fig) -> list[str]:
    """Every piece of text of ``fig``: its own, titles, annotations, tick labels, legends."""
    fig.canvas.draw()
    texts = [t.get_text() for t in fig.texts] + [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    for ax in fig.axes:
        texts += [ax.get_title(), *(t.get_text() for t in ax.texts)]
        texts += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
    return texts


def check_clean(fig) -> None:
    """No empty panel; no "(1 repeats)"; no integer setting written as 1.0."""
    assert fig.axes and all(ax.has_data() for ax in fig.axes)
    for text in all_text(fig):
        assert "1 repeats" not in text and not re.search(r"=\d+\.0\b", text), text


def test_an_engine_sweep_with_ideal_draws_the_exposed_cost_first(figures, tmp_path, capsys):
    out, lines = plot(engine_rows(), tmp_path, capsys)
    raw = side_path(out, "raw")
    assert lines == [f"exposed-cost figure (each plane's decode step and TPOT p50 minus control=ideal's) written "
                     f"to {out}", f"raw-metric figure (p50 bars, p99 whiskers) written to {raw}"]
    exposed, bars = figures
    assert titles(exposed) == ["workload=bench\nideal: step 30 ms, TPOT 31 ms; 2 repeats",
                               "workload=latency\nideal: step 30 ms, TPOT 31 ms; 2 repeats"]
    for ax in exposed.axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["shm", "ring"]
        points = [line for line in ax.get_lines() if line.get_marker() in ("o", "s")]
        assert [p.get_fillstyle() for p in points] == ["none", "none", "full", "full"]  # shm within noise
        assert any(list(line.get_ydata()) == [0, 0] for line in ax.get_lines())  # ideal's line
        assert [t.get_text() for t in ax.texts] == ["+0.7%", "+0.6%", "+10.0%", "+9.7%"]
    assert exposed.texts[0].get_text().startswith("model=qwen3-tiny device=cpu dtype=float32 tp=2\n")
    assert len(bars.axes) == 8 and titles(bars)[:4] == ["output tok/s", "TPOT (ms) p50, whisker p99",
                                                       "decode step (ms) p50, whisker p99",
                                                       "control one-way (us) p50, whisker p99"]
    for fig in figures:
        check_clean(fig)


def test_ideal_beside_the_planes_at_tp1_says_that_nothing_is_exposed(figures, tmp_path, capsys):
    out, lines = plot(engine_rows(tp=1, repeats=1), tmp_path, capsys)  # the message read as if ideal were missing
    assert lines == [f"raw-metric figure (p50 bars, p99 whiskers) written to {out}",
                     "no exposed-cost figure: at tp=1 no plane sends, so nothing is exposed"]
    assert len(figures) == 1


def test_an_engine_sweep_without_ideal_draws_the_raw_metrics_and_says_why(figures, tmp_path, capsys):
    rows = engine_rows(controls=("shm", "ring"), repeats=1)
    out, lines = plot(rows + [{**r, "cpu_threads": 2.0} for r in rows], tmp_path, capsys)
    assert lines == [f"raw-metric figure (p50 bars, p99 whiskers) written to {out}",
                     "no exposed-cost figure: it needs control=ideal rows in the same configuration as the planes'"]
    assert not (tmp_path / "fig_raw.png").exists() and not (tmp_path / "fig_exposed.png").exists()
    (fig,) = figures
    labels = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert labels == [f"cpu_threads={n} workload={w}  (1 repeat)" for n in (1, 2) for w in ("bench", "latency")]
    check_clean(fig)


def test_configurations_of_one_plane_each_share_a_row(figures, tmp_path, capsys):
    """Runs of one plane each (a tag apiece) are bars of one panel, numbered, with a key; not single bars."""
    rows = [{**r, "tag": f"run{i}"} for i, r in enumerate(engine_rows(("shm", "ring", "pipe"), ("bench",), 1))]
    plot(rows, tmp_path, capsys)
    (fig,) = figures
    assert len(fig.axes) == 4
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["1", "2", "3"]
    key = [t.get_text() for t in fig.axes[0].texts if t.get_text().startswith("1:")]
    assert key == ["1: shm  tag=run0\n2: ring  tag=run1\n3: pipe  tag=run2"]
    check_clean(fig)


def test_a_broadcast_sweep_draws_latency_against_message_size(figures, tmp_path, capsys):
    out, lines = plot(broadcast_rows(), tmp_path, capsys)
    assert lines == [f"broadcast figure (one-way latency p50 and p99 against message size) written to {out}"]
    (fig,) = figures
    # a row of panels per tp, named (session 35's trial: 3 tps as line styles in one panel could not be followed)
    assert titles(fig) == ["one-way p50 (us)", "one-way p99 (us)"] * 2
    assert [t.get_text() for ax in fig.axes for t in ax.texts] == ["tp=2  (2 repeats)", "tp=4  (2 repeats)"]
    for ax in fig.axes:  # a line per payload kind: one across them zigzagged between unrelated messages
        assert ax.get_xscale() == "log"
        drawn = [line for line in ax.get_lines() if line.get_linestyle() != "None"]
        assert [line.get_linestyle() for line in drawn] == ["-"] * 6  # 3 planes x 2 kinds each
        assert sorted(list(line.get_xdata()) for line in drawn[:2]) == [[89, 316], [293, 65582, 1048622]]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["shm", "pipe", "ring", "decode", "raw"]
    check_clean(fig)
    plot([r for r in broadcast_rows() if r["tp"] == 2], tmp_path, capsys)  # one tp: one row, tp in the header
    assert len(figures[-1].axes) == 2 and "tp=2" in figures[-1].texts[0].get_text()


def test_a_serve_rate_sweep_keeps_the_load_curves_and_adds_the_exposed_cost_per_rate(figures, tmp_path, capsys):
    out, lines = plot(serve_rows(), tmp_path, capsys)
    assert lines == [f"workload=serve rows: latency-vs-load plot written to {out}",
                     f"workload=serve rows: exposed-cost figure per request rate written to "
                     f"{side_path(out, 'serve_exposed')}"]
    load, exposed = figures
    assert len(load.axes) == 5 and titles(load)[-1] == "completed (req/s)"
    assert [t.split("\n")[0] for t in titles(exposed)] == ["request_rate=4", "request_rate=16", "request_rate=inf"]
    for fig in figures:
        check_clean(fig)


def test_each_serve_section_ends_in_its_own_rate_panel_goodput_only_where_an_slo_was_set(figures, tmp_path,
                                                                                         capsys):
    slo = [{**r, "slo": "ttft_ms=200", "goodput_req_s": r["req_s"] / 2} for r in serve_rows()]
    plot(serve_rows() + slo, tmp_path, capsys)
    load = figures[0]
    assert titles(load)[4::5] == ["completed (req/s)", "goodput (req/s)"]  # the last panel drew blank without SLO
    # ideal's goodput is no floor, as the table's parentheses say: faint like its TTFT (session 33's trial: solid)
    ideal = [c for c in load.axes[9].get_children() if getattr(c, "get_alpha", lambda: None)() == 0.35]
    assert ideal, "ideal's goodput points are not faint"
    check_clean(load)


def test_every_kind_at_once_gives_one_file_and_one_line_each(figures, tmp_path, capsys):
    out, lines = plot(engine_rows() + broadcast_rows(tps=(2,)) + serve_rows(), tmp_path, capsys)
    paths = [out] + [side_path(out, s) for s in ("raw", "broadcast", "load", "serve_exposed")]
    assert [line.rsplit(" ", 1)[1] for line in lines] == paths
    assert all((tmp_path / p).stat().st_size > 10_000 for p in paths)
    assert [len(fig.axes) for fig in figures] == [2, 8, 2, 5, 3]
    for fig in figures:
        check_clean(fig)


def test_labels():
    assert [cell(v) for v in (1.0, 0.5, float("inf"), "-", float("nan"), 4)] == ["1", "0.5", "inf", "", "", "4"]
    assert [repeats_text(c) for c in ([1], [3, 3], [2, 3])] == ["1 repeat", "3 repeats", "2-3 repeats"]
    shared, own = config_labels(["tp", "overrides"], [(2, "a=1 b=2"), (2, "a=1 b=3")])
    assert shared == "tp=2 a=1" and own == ["b=2", "b=3"]  # each override a word of its own
    keys = ["model", "model_hash"]
    assert config_labels(keys, [("m1", "h1"), ("m2", "h2")])[1] == ["model=m1", "model=m2"]  # the hash says no more


def test_a_planes_variants_are_shades_of_its_colour():
    """Session 34's trial: "ring" and "ring spin_us=10000" were drawn in one colour, one line style."""
    planes = ["shm", "ring control.options.spin_us=10000", "ring"]
    order, colours = plane_colours(planes)
    ring = matplotlib.colormaps["tab10"](5)
    assert order == ["shm", "ring", "ring control.options.spin_us=10000"] and colours["ring"] == ring
    assert len({colours[p] for p in planes}) == 3 and all(v >= r for v, r in zip(colours[order[2]], ring))


def test_one_repeat_is_drawn_half_filled_without_a_spread(figures, tmp_path, capsys):
    plot(engine_rows(workloads=("latency",), repeats=1), tmp_path, capsys)
    (ax,) = figures[0].axes
    assert ax.get_title().endswith("; 1 repeat")
    points = [line for line in ax.get_lines() if line.get_marker() in ("o", "s")]
    assert [p.get_fillstyle() for p in points] == ["left"] * 4
    check_clean(figures[0])
    # the legend says only the fills drawn (a new-user trial: "half: one repeat" beside points of 2 repeats each)
    fills = [t.get_text().split(":")[0] for t in figures[0].legends[1].get_texts()]
    assert fills == ["decode step p50", "TPOT p50", "half"]
    figures.clear()
    plot(engine_rows(workloads=("latency",), repeats=2), tmp_path, capsys)
    assert [t.get_text().split(":")[0] for t in figures[0].legends[1].get_texts()][2:] == ["filled", "hollow"]


def test_the_broadcast_table_reads_the_planes_across_one_line_per_payload(tmp_path, capsys):
    """Seven planes at tp=2 and 4: a row per (tp, payload) in order of size, a column per plane, one table of
    p50s and one of p99s, in 120 columns (before: a 3-row table per payload)."""
    from harness.analyze import main

    planes = ("shm", "queue", "pipe", "gloo", "ring", "zmq", "hybrid")
    assert main([write(broadcast_rows(controls=planes), tmp_path / "runs.csv")]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = [line for line in lines if line.startswith("|")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert header == ["tp", "payload", "size", *planes] and max(len(line.encode()) for line in table) <= 120
    payloads = [c.strip("| ").split("|")[1].strip() for c in table[2:12]]  # the p50 table
    assert payloads == 2 * ["decode-1", "raw-256B", "decode-8", "raw-65536B", "raw-1048576B"]
    assert table[2].startswith("|    2 | decode-1     |    89 B |  55.1 |") and "1.05 MB" in table[6]
    assert len(table) == 2 * (2 + 10) and "one-way latency p99 (us)" in "\n".join(lines)


def test_a_plane_below_ideal_has_its_percentages_beside_its_points_not_above_zero(figures, tmp_path, capsys):
    """Session 33's third trial: -13.9% sat near +1000 us above the zero line while its point was at -4400 us."""
    rows = [{**r, "decode_step_ms_p50": r["decode_step_ms_p50"] * 0.5, "tpot_ms_p50": r["tpot_ms_p50"] * 0.5}
            if r["control"] == "ring" else r for r in engine_rows(workloads=("latency",))]
    plot(rows, tmp_path, capsys)
    ax = figures[0].axes[0]
    ring = [a for a in ax.texts if a.get_text().startswith("-")]
    assert ring and all(a.xy[1] < 0 for a in ring), [(a.get_text(), a.xy) for a in ax.texts]
