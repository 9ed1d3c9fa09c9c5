"""python -m harness.analyze on workload=serve rows: a rate sweep's table, exposed cost per rate, the
latency-vs-load figure, and --compare across the schema that added the serve columns. No process is run:
the rows are made here."""

from __future__ import annotations

import io
import math
import re

import pandas as pd
import pytest

from harness.analyze import fill_keys, group_keys, main
from harness.exposed import exposed_cost
from harness.load_results import prepare_serve
from harness.schema import COLUMNS, SCHEMA_VERSION

RATES = (4.0, 16.0, float("inf"))


def serve_rows(controls=("ideal", "shm"), rates=RATES, repeats=2, goodput=False, tp=2) -> list[dict]:
    """Rows as ``-m control=... workload=serve workload.request_rate=4,16,inf repeat=2`` writes them: TPOT and
    decode step of ideal 20 + rate/4 ms (+1 ms per repeat), shm's 0.5 ms more; at rate inf no sending rate."""
    rows = []
    for control in controls:
        for rate in rates:
            for repeat in range(repeats):
                finite = rate != float("inf")
                step = (20 + (rate / 4 if finite else 10)) + repeat + (0.5 if control == "shm" else 0)
                done = min(rate, 12.0) - 0.1 * repeat
                rows.append({"schema_version": SCHEMA_VERSION, "status": "ok", "engine": "tp", "control": control,
                             "tp": tp, "model": "qwen3-tiny", "device": "cpu", "dtype": "float32",
                             "workload": "serve", "request_rate": rate, "burstiness": 1.0, "seed": 0,
                             "overrides": f"workload.request_rate={rate:g}", "repeat": repeat,
                             "slo": "ttft_ms=200" if goodput else None, "req_s": done, "output_tok_s": 40 * done,
                             "achieved_rate_req_s": rate * 0.95 if finite else None,
                             "goodput_req_s": done * 0.9 if goodput else None,
                             "ttft_ms_p50": 50 * (1 + 40 * (done / 12) ** 4), "ttft_ms_p99": 3000.0,
                             "tpot_ms_p50": step, "tpot_ms_p99": 1.5 * step, "decode_step_ms_p50": step - 1,
                             "queue_ms_p99": 10.0 * done, "ctrl_calls": 100})
    return rows


def write(rows: list[dict], path) -> str:
    pd.DataFrame(rows).reindex(columns=COLUMNS).to_csv(path, index=False)
    return str(path)


def table_lines(out: str, first_header: str = "sent/s") -> list[str]:
    """The markdown lines of the serve table (the one whose header names ``first_header``)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|") and first_header in line)
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip("|").split("|")]


def test_rows_at_two_rates_are_never_pooled_and_inf_sorts_last(tmp_path, capsys):
    assert main([write(serve_rows(), tmp_path / "runs.csv")]) == 0
    table = table_lines(capsys.readouterr().out)
    header = cells(table[0])
    assert header[:4] == ["tp", "control", "rate", "n"] and "overrides" not in header  # rate: its own column
    shm = [cells(line) for line in table[2:] if cells(line)[1] == "shm"]
    assert [r[2] for r in shm] == ["4", "16", "inf"] and all(r[3] == "2" for r in shm)
    tpot = header.index("tpot50")
    assert [r[tpot] for r in shm] == ["22±2%", "25±2%", "31±2%"]  # 21.5, 22.5 and 24.5, 25.5...: repeats apart
    assert shm[2][header.index("sent/s")] == ""  # at inf all are sent at once: no sending rate


def test_a_rate_typed_or_by_default_is_one_configuration_and_other_settings_stay_apart(tmp_path, capsys):
    rows = serve_rows(controls=("shm",), rates=(16.0,))
    rows[1]["overrides"] = "llm.async_scheduling=true"  # no rate typed: the workload's default, 16
    df = prepare_serve(pd.DataFrame(rows).reindex(columns=COLUMNS))
    assert set(df.overrides.dropna()) == {"llm.async_scheduling=true"}
    assert "overrides" in group_keys(df, None)  # an async on/off pair is still two configurations
    rows[1]["overrides"] = None
    assert main([write(rows, tmp_path / "runs.csv")]) == 0
    table = table_lines(capsys.readouterr().out)
    assert len(table) == 3 and cells(table[2])[cells(table[0]).index("n")] == "2"


def test_exposed_cost_is_given_for_each_rate(capsys):
    df = prepare_serve(pd.DataFrame(serve_rows()).reindex(columns=COLUMNS))
    keys = group_keys(df, None)
    assert keys == ["tp", "control", "request_rate"]
    table = exposed_cost(fill_keys(df, keys), keys)
    tpot = table[table.metric == "TPOT p50"]
    assert list(tpot.request_rate) == [4.0, 16.0, float("inf")] and set(tpot.control) == {"shm"}
    assert list(tpot.exposed_us) == pytest.approx([500, 500, 500])
    assert list(tpot.ideal_ms) == pytest.approx([21.5, 24.5, 30.5]) and set(tpot.verdict) == {"within noise"}
    step = table[table.metric == "decode step p50"].set_index("request_rate")
    assert step.loc[16.0].plane_ms == pytest.approx(24) and step.loc[16.0].low_us == pytest.approx(-500)


def test_the_exposed_table_prints_each_rate_once_in_order(tmp_path, capsys):
    assert main([write(serve_rows(), tmp_path / "runs.csv"), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    exposed = [cells(line) for line in out[out.index("exposed cost"):].splitlines() if "TPOT p50" in line]
    assert [r[1] for r in exposed] == ["4", "16", "inf"] and all(r[6] == "+500.0" for r in exposed)


@pytest.mark.parametrize("goodput", [False, True])
def test_the_serve_table_fits_in_120_characters(goodput, tmp_path, capsys):
    rows = serve_rows(controls=("ideal", "shm", "hybrid"), rates=(0.5, 2, 8, 32, 128, float("inf")),
                      goodput=goodput)
    for r in rows:  # latencies of 5 digits, spreads of 2
        r["ttft_ms_p99"], r["queue_ms_p99"] = 12345.0 + 2000 * r["repeat"], 9876.5 * (1 + r["repeat"] / 10)
    assert main([write(rows, tmp_path / "runs.csv")]) == 0
    out = capsys.readouterr().out
    table = table_lines(out)
    assert len(table) == 2 + 3 * 6 and max(map(len, table)) <= 120
    header = cells(table[0])
    assert ("good/s" in header) == goodput and ("done/s" in header) != goodput
    assert all(len(line) <= 110 for line in out[:out.index(table[0])].splitlines())  # the legend above it
    slo = ", slo=ttft_ms=200" if goodput else ""
    assert (f"every row: model=qwen3-tiny, device=cpu, dtype=float32, workload=serve, tp=2, burstiness=1{slo}"
            in out.splitlines())


@pytest.mark.parametrize("tp", [2, 1])
def test_ideals_cells_that_follow_its_recording_are_in_parentheses(tp, tmp_path, capsys):
    # a new-user trial: ideal's TTFT p99 289 ms beside shm's 64 read as a bad plane, with nothing on its cells
    assert main([write(serve_rows(goodput=True, tp=tp), tmp_path / "runs.csv")]) == 0
    out = capsys.readouterr().out
    header, _, *rows = [cells(line) for line in table_lines(out)]
    at = {h: i for i, h in enumerate(header)}
    marked = [h for h in ("sent/s", "good/s", "done/s", "ttft50", "ttft99", "queue") if h in at]
    for row in rows:
        paren = {h: row[at[h]].startswith("(") for h in marked + ["tpot50"] if row[at[h]]}
        ideal = row[at["control"]] == "ideal" and tp > 1  # tp=1: no replay, ideal serves the trace as asked
        assert paren == {h: ideal and h != "tpot50" for h in paren}, row
    assert ("its cells\nin parentheses" in out) == (tp > 1) and all(len(line) <= 120 for line in out.splitlines())


def test_a_narrow_serve_table_leaves_out_the_queue_and_sent_rate_before_any_tpot(tmp_path, capsys):
    rows = [{**r, "burstiness": b, "max_concurrency": c, "ttft_ms_p99": 12345.0, "tpot_ms_p99": 1234.5}
            for r in serve_rows(controls=("ideal", "shm", "ring")) for b in (0.5, 1.0) for c in (8, 16)]
    assert main([write(rows, tmp_path / "runs.csv")]) == 0
    out = capsys.readouterr().out
    table = table_lines(out, "burst")
    assert cells(table[0]) == ["tp", "control", "rate", "burst", "conc", "n", "done/s", "ttft50", "ttft99", "tpot50",
                               "tpot99"], table[0]  # TPOT was left out first, the constant-looking keys kept
    assert max(map(len, table)) <= 120 and "left out to fit: sent/s, queue" in " ".join(out.split())


def test_burstiness_inf_reads_inf_not_an_empty_cell(tmp_path, capsys):
    """A new user's trial: workload.burstiness=inf (evenly spaced arrivals) was "-" in the tables, empty in csv."""
    rows = [{**r, "burstiness": b} for r in serve_rows(controls=("ideal", "shm")) for b in (1.0, math.inf)]
    path = write(rows, tmp_path / "runs.csv")
    assert main([path]) == 0
    assert sorted({cells(line)[3] for line in table_lines(capsys.readouterr().out, "burst")[2:]}) == ["1", "inf"]
    assert main([path, "--format", "csv"]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert set(table[table.table == "serve"].burstiness) == {1.0, math.inf}


def png_size(path) -> tuple[int, int]:
    """(width, height) in pixels from a PNG's header; fails unless it is a PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


@pytest.mark.parametrize("goodput", [False, True])
def test_the_latency_vs_load_figure_is_written(goodput, tmp_path, capsys):
    rows = serve_rows(rates=(0.5, 2, 8, 32, float("inf")), goodput=goodput) + serve_rows(tp=4, repeats=1)
    png = tmp_path / "load.png"
    assert main([write(rows, tmp_path / "runs.csv"), "--plot", str(png)]) == 0
    assert f"latency-vs-load plot written to {png}" in capsys.readouterr().out
    width, height = png_size(png)
    assert png.stat().st_size > 20_000 and 1200 <= width <= 2500 and 300 <= height <= 1500


def test_the_figure_draws_a_panel_for_each_metric_and_the_inf_rate(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from harness.plot_curves import plot_load

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    df = prepare_serve(pd.DataFrame(serve_rows(rates=(4.0, float("inf")))).reindex(columns=COLUMNS))
    plot_load(fill_keys(df, ["tp", "control"]), ["tp", "control"], str(tmp_path / "x.png"))
    axes = figures[0].axes
    assert [ax.get_title() for ax in axes][-1] == "completed (req/s)"  # no goodput: the completed rate
    assert all(ax.has_data() for ax in axes)
    hollow = [line for ax in axes for line in ax.get_lines() if line.get_marker() == "D"]
    assert len(hollow) == 2 * len(axes)  # rate inf, both planes, every panel (on y = x in completed-vs-sent)
    assert [x for line in hollow for x in line.get_xdata()] == pytest.approx([11.95] * 10)  # its completed req/s
    assert "rate inf (x: sent req/s, else completed)" in [t.get_text() for t in figures[0].legends[0].get_texts()]
    # TTFT p50 and p99 on one kind of axis (a new-user trial: p50 log beside p99 linear, each chosen alone)
    assert [ax.get_yscale() for ax in axes[:4]] == ["log", "log", "linear", "linear"]
    # a new-user trial: the legend named the rate-inf diamond where no point was drawn for it
    df = prepare_serve(pd.DataFrame(serve_rows(rates=(4.0,))).reindex(columns=COLUMNS))
    plot_load(fill_keys(df, ["tp", "control"]), ["tp", "control"], str(tmp_path / "y.png"))
    assert not any("rate inf" in t.get_text() for t in figures[1].legends[0].get_texts())


def test_a_goodput_of_0_is_drawn_not_lost_on_a_log_axis(tmp_path, monkeypatch):
    """A new user's trial: every request missing the SLO (goodput 0) vanished from the log-scaled goodput panel."""
    import matplotlib.pyplot as plt

    from harness.plot_curves import plot_load

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    rows = [{**r, "goodput_req_s": 0.0 if r["request_rate"] == 32 else r["goodput_req_s"]}
            for r in serve_rows(rates=(0.5, 2, 8, 32), goodput=True)]
    df = prepare_serve(pd.DataFrame(rows).reindex(columns=COLUMNS))
    plot_load(fill_keys(df, ["tp", "control"]), ["tp", "control"], str(tmp_path / "x.png"))
    goodput = figures[0].axes[-1]
    assert goodput.get_title() == "goodput (req/s)" and goodput.get_yscale() == goodput.get_xscale() == "linear"
    assert 0.0 in [y for line in goodput.get_lines() for y in line.get_ydata()]


def test_the_rate_panels_axes_share_one_scale_so_its_diagonal_is_y_equals_x(tmp_path, monkeypatch):
    """A new user's trial: a goodput of 0.08 req/s at 2.6 sent gave a log y beside a linear x, and the straight
    dotted line labelled y = x passed y = 0.45 at x = 1."""
    import matplotlib.pyplot as plt

    from harness.plot_curves import plot_load

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    rows = [{**r, "goodput_req_s": 0.08, "achieved_rate_req_s": 2.6} for r in serve_rows(rates=(4.0,), goodput=True)]
    df = prepare_serve(pd.DataFrame(rows).reindex(columns=COLUMNS))
    plot_load(fill_keys(df, ["tp", "control"]), ["tp", "control"], str(tmp_path / "x.png"))
    goodput = figures[0].axes[-1]
    assert goodput.get_xscale() == goodput.get_yscale() == "log"
    diagonal = [line for line in goodput.get_lines() if line.get_linestyle() == ":"]
    assert len(diagonal) == 1 and list(diagonal[0].get_xdata()) == list(diagonal[0].get_ydata())


def test_rows_of_both_kinds_give_two_figures_and_one_line(tmp_path, capsys):
    smoke = [{**r, "workload": "smoke", "request_rate": None, "burstiness": None, "overrides": None,
              "achieved_rate_req_s": None} for r in serve_rows(rates=(4.0,))]
    png = tmp_path / "both.png"
    assert main([write(serve_rows() + smoke, tmp_path / "runs.csv"), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert png_size(png) and png_size(tmp_path / "both_load.png")
    assert f"workload=serve rows: latency-vs-load plot written to {tmp_path / 'both_load.png'}" in out
    assert "tok/s" in out and "sent/s" in out  # each kind its own table


def test_compare_across_the_schema_that_added_the_serve_columns(tmp_path, capsys):
    """A schema-9 baseline (no serve columns) against schema-10 smoke rows (serve columns empty): the CI gate
    still matches every configuration."""
    smoke = [{**r, "workload": "smoke", "request_rate": None, "burstiness": None, "overrides": None,
              "achieved_rate_req_s": None, "queue_ms_p99": None} for r in serve_rows(rates=(4.0,), repeats=3)]
    new = write(smoke, tmp_path / "new.csv")
    old = pd.DataFrame(smoke).reindex(columns=COLUMNS).drop(
        columns=[c for c in COLUMNS if re.match(r"request_rate|burstiness|max_conc|slo|achieved|goodput|queue_|"
                                                r"serve_loop|.*_std$", c)]).assign(schema_version=9)
    old.to_csv(tmp_path / "old.csv", index=False)
    assert main(["--compare", str(tmp_path / "old.csv"), new, "--metrics", "ctrl_calls", "--threshold", "0%"]) == 0
    assert "2 configuration(s) compared, 0 regression(s)" in capsys.readouterr().out


def test_compare_of_a_rate_sweep_matches_each_rate(tmp_path, capsys):
    path = write(serve_rows(repeats=3), tmp_path / "runs.csv")
    assert main(["--compare", path, path]) == 0
    assert "6 configuration(s) compared" in capsys.readouterr().out
    worse = [{**r, "tpot_ms_p50": 2 * r["tpot_ms_p50"]} for r in serve_rows(repeats=3)]
    assert main(["--compare", path, write(worse, tmp_path / "worse.csv")]) == 1
    out = capsys.readouterr().out
    assert "WORSE  control=ideal, tp=2, request_rate=4: tpot_ms_p50" in out, out  # as the tables say it: not 4.0


def test_the_sweeps_summary_reads_the_rows_as_the_harness_holds_them(capsys):
    """At the end of a sweep the rows are dicts: rate a float (inf) or an int, max_concurrency None or an int."""
    from harness.analyze import print_sweep_summary

    rows = serve_rows(rates=(4, float("inf")))
    for r in rows:
        r["max_concurrency"] = 8 if r["repeat"] else None
    print_sweep_summary(rows, jobs=len(rows))
    table = table_lines(capsys.readouterr().out)
    header = cells(table[0])
    assert header[:5] == ["tp", "control", "rate", "conc", "n"]
    assert [cells(line)[2:4] for line in table[2:4]] == [["4", "8"], ["4", "-"]]


def test_serve_rows_in_markdown_carry_no_ratio_to_ideal(tmp_path, capsys):
    """Ideal's TTFT and queueing follow its recording's admissions (docs/SERVE.md): a ratio to them meant
    nothing (the second walkthrough read queue_ms_p99 at 115.65x)."""
    assert main([write(serve_rows(), tmp_path / "runs.csv"), "--format", "markdown"]) == 0
    table = table_lines(capsys.readouterr().out, first_header="ttft_ms_p50")
    assert table and not any(re.search(r"\d\.\d\dx\)", line) for line in table)


def test_the_overrides_every_row_shares_are_said_above_the_serve_table(tmp_path, capsys):
    """A helper's find (session 21): the serve table's sections left them out, and nothing above said them."""
    rows = serve_rows()
    for i, r in enumerate(rows):
        r["overrides"] += " llm.max_num_seqs=8" + (" llm.async_scheduling=true" if i % 2 else "")
    assert main([write(rows, tmp_path / "runs.csv")]) == 0
    out = capsys.readouterr().out
    serve = out[:out.index("exposed")]  # the serve table, before the exposed-cost one
    assert "every row: overrides llm.max_num_seqs=8" in serve and "-- overrides: only every row's" in serve


def test_a_table_of_one_section_names_its_overrides(tmp_path, capsys):
    """Session 52's trial: a section alone was labelled "overrides: only every row's", and no line said them."""
    rows = serve_rows()
    for r in rows:
        r["overrides"] += " llm.max_num_seqs=8"
    assert main([write(rows, tmp_path / "runs.csv")]) == 0
    out = capsys.readouterr().out
    assert "every row: overrides workload.request_rate" not in out and "every row: overrides " in out
    assert out.count("llm.max_num_seqs=8") == 1
    extra = [{**r, "overrides": r["overrides"] + " llm.async_scheduling=true"}
             for r in rows if r["control"] == "shm"]  # two sections in the serve table, one in the exposed (no ideal)
    assert main([write(rows + extra, tmp_path / "runs.csv")]) == 0
    exposed = (out := capsys.readouterr().out)[out.index("exposed"):]
    assert "only every row's" not in exposed and "-- overrides: llm.max_num_seqs=8" in exposed


def test_the_gate_leaves_timing_dependent_serve_metrics_and_ideals_ttft_unjudged_unless_asked(tmp_path, capsys):
    # a new-user trial: a serve sweep failed the gate on ctrl_calls (more steps: requests came apart) and on
    # ideal's TTFT, which follows its recording's admissions
    rows = serve_rows(rates=(4.0,), repeats=3)
    twice = {"ttft_ms_p50": 2, "output_tok_s": 0.5, "req_s": 0.5}  # ideal's (a new user's trial: its goodput too)
    moved = [{**r, "ctrl_calls": 2 * r["ctrl_calls"], **{k: (f if r["control"] == "ideal" else 1) * r[k]
                                                          for k, f in twice.items()}} for r in rows]
    old, new = write(rows, tmp_path / "old.csv"), write(moved, tmp_path / "new.csv")
    assert main(["--compare", old, new]) == 0
    out = capsys.readouterr().out
    assert "serve rows: ctrl_calls and ctrl_bytes_mean are not gated" in out and "WORSE" not in out
    assert main(["--compare", old, new, "--metrics", "ctrl_calls", "ttft_ms_p50"]) == 1
    out = capsys.readouterr().out  # ideal's and shm's calls (a count: CHANGED), ideal's TTFT
    assert out.count("CHANGED") == 2 and out.count("WORSE") == 1


@pytest.mark.parametrize("baseline, fmt, says", [
    ("ideal", "text", "no ratios for serve rows: ideal's TTFT"), ("ideal", "markdown", "no ratios for serve rows"),
    ("shm", "text", "the text serve table has no ratio columns (--format markdown has)"), ("shm", "markdown", None)])
def test_a_baseline_the_serve_table_cannot_use_is_said_not_dropped_silently(baseline, fmt, says, tmp_path, capsys):
    assert main([write(serve_rows(), tmp_path / "runs.csv"), "--baseline", baseline, "--format", fmt]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: --baseline")]
    assert notes == ([] if says is None else [notes[0]]) and (says is None or says in notes[0])


def test_ideal_sending_faster_than_the_plane_is_said_under_the_exposed_cost(tmp_path, capsys):
    # a new-user trial: ideal sent 6.15 req/s beside shm's 4.00 at rate 4, and the table paired them silently
    rows = serve_rows(rates=(4.0, 16.0))
    for r in rows:
        if r["control"] == "ideal" and r["request_rate"] == 4.0:
            r["achieved_rate_req_s"] = 6.15
    assert main([write(rows, tmp_path / "runs.csv")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "note: tp=2, request_rate=4: ideal sent 6.15 req/s beside shm's 3.80: it admitted requests ahead" in out
    assert "request_rate=16: ideal sent" not in out
    for r in rows:  # session 34: slower under max_concurrency, and the note said "ahead of the trace"
        if r["control"] == "ideal" and r["request_rate"] == 4.0:
            r["achieved_rate_req_s"] = 3.0
    assert main([write(rows, tmp_path / "slower.csv")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "ideal sent 3.00 req/s beside shm's 3.80: its requests went in later" in out and "ahead" not in out
    assert main([str(tmp_path / "runs.csv"), "--group", "control"]) == 0  # no key before control: "note: : ideal"
    assert "note: ideal sent " in capsys.readouterr().out
    assert main([str(tmp_path / "runs.csv"), "--format", "csv"]) == 0  # a new user's trial: csv dropped it
    out, err = capsys.readouterr()
    assert "note: tp=2, request_rate=4: ideal sent 6.15" in err and "note:" not in out


def test_ideal_running_other_batches_at_the_same_sent_rate_is_said_too(tmp_path, capsys):
    """The serve user's trial: at rate 16 ideal held requests to its recording's launches (queue p50 1377 ms beside
    12), its batches were 8.0 sequences beside 5.9 and TPOT came out -18.8%, with no note: its sent rate matched.
    The note names the plane (session 40's trial: seven planes' notes read alike)."""
    rows = serve_rows(rates=(4.0, 16.0))
    for r in rows:  # 12 requests of 25 tokens: 288 decode tokens
        steps = 36 if r["control"] == "ideal" and r["request_rate"] == 16.0 else 49
        r.update(num_requests=12, output_tokens=300, decode_steps=steps)
    assert main([write(rows, tmp_path / "runs.csv"), "--plot", str(tmp_path / "f.png")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("note: tp=2, request_rate=16: ideal ran decode batches of 8.00 sequences on average beside shm's 5.88: its "
            "requests went in at its recording's launches, not as they arrived and its step is no floor here") in out
    assert "request_rate=4: ideal" not in out
    import matplotlib.pyplot as plt

    from harness import plots

    titles = []
    real = plots.save_figure
    plots.save_figure = lambda fig, *a: titles.extend(ax.get_title() for ax in fig.axes) or real(fig, *a)
    try:
        assert main([str(tmp_path / "runs.csv"), "--plot", str(tmp_path / "g.png")]) == 0
    finally:
        plots.save_figure = real
        plt.close("all")
    assert [("batches differ" in t) for t in titles if "rate" in t] == [False, True], titles


def test_the_gate_compares_goodput_and_ttft_p50_each_the_right_way(tmp_path, capsys):
    # a new-user trial: "--metrics goodput_req_s ttft_ms_p50" was "not comparable"
    rows = serve_rows(controls=("shm",), rates=(4.0,), repeats=3, goodput=True)
    worse = [{**r, "goodput_req_s": r["goodput_req_s"] / 2, "ttft_ms_p50": r["ttft_ms_p50"] * 2} for r in rows]
    old, new = write(rows, tmp_path / "old.csv"), write(worse, tmp_path / "new.csv")
    assert main(["--compare", old, new, "--metrics", "goodput_req_s", "ttft_ms_p50"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"WORSE .*goodput_req_s .*\(-50\.0%", out) and re.search(r"WORSE .*ttft_ms_p50 .*\(\+100\.0%", out)
    assert main(["--compare", new, old, "--metrics", "goodput_req_s", "ttft_ms_p50"]) == 0
    assert capsys.readouterr().out.count("better") == 2


def test_goodput_is_shown_with_its_slo_and_rows_without_one_keep_done_per_s(tmp_path, capsys):
    # a new-user trial: good/s came without its SLO, and rows without one showed an empty good/s, no done/s
    assert main([write(serve_rows(rates=(4.0,), goodput=True), tmp_path / "slo.csv")]) == 0
    out = capsys.readouterr().out
    assert ("every row: model=qwen3-tiny, device=cpu, dtype=float32, workload=serve, tp=2, burstiness=1, "
            "slo=ttft_ms=200") in out
    assert "good/s = goodput_req_s, completed within the slo named above" in " ".join(out.split())
    mixed = serve_rows(rates=(4.0,), goodput=True) + serve_rows(rates=(4.0,))
    assert main([write(mixed, tmp_path / "mixed.csv")]) == 0
    out = capsys.readouterr().out
    assert "slo=" not in out.split("\n-- ")[0].splitlines()[1]  # not every row's
    done, good = table_lines(out, "done/s"), table_lines(out.split("-- slo=ttft_ms=200")[1], "good/s")
    assert "good/s" not in done[0] and [cells(line)[5] for line in done[2:]] == ["(3.95±1%)", "3.95±1%"]  # ideal's
    assert "done/s" not in good[0] and [cells(line)[5] for line in good[2:]] == ["(3.55±1%)", "3.55±1%"]  # ideal's


def test_rate_inf_under_max_concurrency_sits_at_its_sent_rate_and_fills_the_completed_panel(tmp_path, monkeypatch):
    """Reported (session 34's trial): a section of rate-inf rows drew an empty "completed" panel, and a row held by
    max_concurrency sat at its completed rate though it has a sent rate, as the tables show."""
    import matplotlib.pyplot as plt

    from harness.plot_curves import plot_load

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    rows = [{**r, "max_concurrency": 2, "achieved_rate_req_s": 1.1357} for r in serve_rows(rates=(float("inf"),))]
    df = prepare_serve(pd.DataFrame(rows).reindex(columns=COLUMNS))
    plot_load(fill_keys(df, ["tp", "control"]), ["tp", "control"], str(tmp_path / "x.png"))
    axes = figures[0].axes
    assert all(ax.has_data() for ax in axes) and axes[-1].get_title() == "completed (req/s)"
    diamonds = [line for line in axes[-1].get_lines() if line.get_marker() == "D"]
    assert len(diamonds) == 2 and all(list(d.get_xdata()) == pytest.approx([1.1357]) for d in diamonds)


def test_the_sent_rate_at_rate_inf_under_max_concurrency_is_shown_and_the_legend_does_not_deny_it(tmp_path, capsys):
    # a new-user trial: the docs and the legend said "empty at rate inf", yet max_concurrency=2 gave 1.1357
    rows = [{**r, "max_concurrency": 2, "achieved_rate_req_s": 1.1357} for r in serve_rows(rates=(float("inf"),))]
    assert main([write(rows, tmp_path / "runs.csv")]) == 0
    out = capsys.readouterr().out
    assert [cells(line)[4] for line in table_lines(out)[2:]] == ["(1.14±0%)", "1.14±0%"]  # after tp, control, rate, n
    assert "empty at rate inf" not in out and "empty where all were sent at once" in " ".join(out.split())


def test_serve_rows_at_one_rate_still_show_it(tmp_path, capsys):
    """The legend names a rate column: rows that all ran at one rate (so it is no differing key) still have it."""
    main([write(serve_rows(controls=("shm",), rates=(4.0,)), tmp_path / "one.csv")])
    lines = table_lines(capsys.readouterr().out)
    assert cells(lines[0])[:3] == ["tp", "control", "rate"]
    assert all(cells(line)[2] == "4" for line in lines[2:])


def test_ideal_at_tp1_is_drawn_as_plainly_as_any_plane(tmp_path):
    """The serve user's trial: at tp=1 nothing is replayed and the tables print ideal's TTFT plainly, yet the load
    figure drew it faint under "(TTFT, rates faint: no floor)"."""
    import matplotlib.pyplot as plt

    from harness.plot_common import plane_colours
    from harness.plot_curves import draw_load_panel, load_legend

    rows = pd.DataFrame(serve_rows(tp=1) + serve_rows(tp=2))
    _, colours = plane_colours(rows.control)
    fig, ax = plt.subplots()
    try:
        for tp in (1, 2):
            ax.clear()
            draw_load_panel(ax, rows[rows.tp == tp], "ttft_ms_p50", colours, [tp])
            alphas = {line.get_alpha() for line in ax.lines if line.get_color() == colours["ideal"]}
            assert alphas == ({1.0} if tp == 1 else {0.35}), (tp, alphas)
    finally:
        plt.close(fig)
    labels = [[h.get_label() for h in load_legend(["ideal", "shm"], tps, colours, False)][0] for tps in ([1], [1, 2])]
    assert labels == ["ideal", "ideal (TTFT, rates faint: no floor at tp > 1)"]


@pytest.mark.parametrize("tp", [1, 2])
def test_markdown_says_which_of_ideals_cells_are_no_floor_and_n_is_repeats(tp, tmp_path, capsys):
    """The serve user's trial: --format markdown printed ideal's TTFT and goodput plainly (the text table puts them
    in parentheses), and no legend said the serve table's n counts repeats, not requests."""
    path = write(serve_rows(tp=tp), tmp_path / "runs.csv")
    assert main([path, "--format", "markdown"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("ideal under arrivals")]
    assert (len(notes), "ttft_ms_p50" in "".join(notes)) == ((0, False) if tp == 1 else (1, True))
    assert main([path]) == 0
    assert "n = ok repeats (not requests)" in " ".join(capsys.readouterr().out.split())


def test_a_lone_point_shows_its_tp_by_its_marker(tmp_path, monkeypatch):
    """A new user's trial: tp told apart by line style alone, so one tp=1 point read as an outlier of tp=2."""
    import matplotlib.pyplot as plt

    from harness.plot_curves import plot_load

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    rows = serve_rows(controls=("shm",), rates=(4.0,), tp=1) + serve_rows(controls=("shm",), rates=(2.0, 4.0))
    df = prepare_serve(pd.DataFrame(rows).reindex(columns=COLUMNS))
    plot_load(fill_keys(df, ["tp", "control"]), ["tp", "control"], str(tmp_path / "x.png"))
    markers = {line.get_marker() for line in figures[0].axes[0].get_lines() if len(line.get_xdata())}
    assert {"o", "s"} <= markers
    legend = {t.get_text(): h.get_marker() for t, h in zip(figures[0].legends[0].get_texts(),
                                                         figures[0].legends[0].legend_handles)}
    assert legend["tp=1"] == "o" and legend["tp=2"] == "s"
