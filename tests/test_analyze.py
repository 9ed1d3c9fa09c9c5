"""python -m harness.analyze: table, plot, the --compare gate, damaged input, failed and diverted rows."""

from __future__ import annotations

import os
import re

import pandas as pd
import pytest

from harness.analyze import main
from harness.schema import COLUMNS, SCHEMA_VERSION


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> str:
    """A results CSV shaped as the sweep -m control=shm,pipe tp=1,2 workload=smoke repeat=2 writes (8 rows,
    every column of the schema), made here without running anything: analysis is what is tested."""
    rows = []
    for control in ("shm", "pipe"):
        for tp in (1, 2):
            for repeat in (0, 1):
                tok_s = 400.0 * tp + 10 * repeat + (5 if control == "pipe" else 0)
                rows.append({"schema_version": SCHEMA_VERSION, "status": "ok", "engine": "tp", "control": control,
                             "tp": tp, "model": "qwen3-tiny", "device": "cpu", "dtype": "float32",
                             "all_reduce": "none" if tp == 1 else "gloo", "workload": "smoke", "seed": 0,
                             "repeat": repeat, "output_tok_s": tok_s, "total_tok_s": 3 * tok_s, "req_s": tok_s / 6,
                             "ttft_ms_p99": 90.0 + repeat, "tpot_ms_p50": 30.0 - repeat, "tpot_ms_p99": 35.0,
                             "itl_ms_p99": 40.0, "e2el_ms_p99": 300.0, "decode_step_ms_p50": 29.0 + repeat,
                             "ctrl_calls": 8, "ctrl_bytes_mean": 135.0 if tp == 2 else 0.0,
                             "ctrl_oneway_us_p50": 100.0 + repeat if tp == 2 else None,
                             "ctrl_oneway_us_p99": 900.0 if tp == 2 else None,
                             "ctrl_launch_lag_us_p50": -3.0 + repeat if tp == 2 else None})
    path = tmp_path_factory.mktemp("sweep") / "runs.csv"
    pd.DataFrame(rows).reindex(columns=COLUMNS).to_csv(path, index=False)
    return str(path)


def test_table_and_plot(sweep, tmp_path, capsys):
    png = tmp_path / "plot.png"
    assert main([sweep, "--plot", str(png), "--format", "markdown"]) == 0  # the full table: every metric
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("|"))
    cells = [c.strip() for c in header.strip("|").split("|")]
    assert cells[:2] == ["tp", "control"] and "n" in cells and "output_tok_s" in cells
    shm_rows = [line for line in lines if re.match(r"\|\s+\d\s+\|\s+shm\s", line)]
    assert len(shm_rows) == 2 and "(1.00x)" in shm_rows[1]  # shm against itself at tp=2
    assert "x)" not in shm_rows[0] and "none at tp=1 (no plane sends there)" in " ".join(lines)  # tp=1: no ratios
    lag = cells.index("ctrl_launch_lag_us_p50")  # shown, but never as a ratio: it can be negative
    tp2_shm = [c.strip() for c in shm_rows[1].strip("|").split("|")]
    assert tp2_shm[lag] == "-2.5 [-3 .. -2]"
    assert png.stat().st_size > 10_000


def test_compare_flags_halved_throughput_and_passes_identical(sweep, tmp_path, capsys):
    assert main(["--compare", sweep, sweep]) == 0
    worse = tmp_path / "worse.csv"
    df = pd.read_csv(sweep)
    df["output_tok_s"] /= 2
    df.to_csv(worse, index=False)
    assert main(["--compare", sweep, str(worse), "--threshold", "10%"]) == 1
    out = capsys.readouterr().out
    assert "WORSE" in out and "fewer than 3 repeats" in out  # two repeats: the gate warns


@pytest.mark.parametrize("damage", ["column deleted", "every cell text", "every cell inf"])
def test_compare_fails_when_new_has_no_value_of_a_metric_old_has(damage, sweep, tmp_path, capsys):
    """Session-7 break test: NEW with throughput halved and then its columns deleted (or every cell damaged)
    passed the gate, "0 regression(s)", even with ``--metrics output_tok_s``."""
    df = pd.read_csv(sweep)
    df["output_tok_s"] /= 2
    if damage == "column deleted":
        df = df.drop(columns=["output_tok_s", "req_s", "total_tok_s"])
    else:
        df["output_tok_s"] = "abc" if damage == "every cell text" else float("inf")
    bad = tmp_path / "bad.csv"
    df.to_csv(bad, index=False)
    for extra in ([], ["--metrics", "output_tok_s"]):
        assert main(["--compare", sweep, str(bad), *extra]) == 1
        assert "NO VALUE in NEW: output_tok_s" in capsys.readouterr().out


@pytest.mark.parametrize("metrics", [[], ["--metrics", "output_tok_s", "itl_ms_p99"],
                                     ["--metrics", "output_tok_s,itl_ms_p99"],
                                     ["--metrics", "output_tok_s, itl_ms_p99", "output_tok_s"]])  # a crash: twice
def test_the_gates_last_line_names_every_reason_and_the_threshold_as_given(metrics, sweep, tmp_path, capsys):
    """Session 33's new-user trial: with a regression and a missing value the last line named the regression
    only; --threshold 2.5% was printed "beyond 2%"; --metrics a,b (vLLM's lists) was one unknown name."""
    df = pd.read_csv(sweep)
    df["output_tok_s"] /= 2
    df = df.drop(columns=["itl_ms_p99"])
    bad = tmp_path / "bad.csv"
    df.to_csv(bad, index=False)
    assert main(["--compare", sweep, str(bad), "--threshold", "2.5%", *metrics]) == 1
    out = capsys.readouterr().out
    n = len(pd.read_csv(sweep).groupby(["tp", "control"]))
    assert "regression(s) beyond 2.5% with the spreads apart" in out
    assert out.strip().splitlines()[-1] == (f"the gate fails: {n} regression(s) and {n} metric value(s) missing on a "
                                            "side, listed above (--allow-missing lists them without failing)")


@pytest.mark.parametrize("given", ["", ",", " , "])
def test_an_empty_metrics_list_is_refused_not_read_as_every_metric(given, sweep, capsys):
    """Session 33's second trial: --metrics "" gated on every metric and exited 0."""
    assert main(["--compare", sweep, sweep, "--metrics", given]) == 2
    assert capsys.readouterr().err.strip() == "error: --metrics: give at least one metric name"


def test_compare_fails_on_an_asked_metric_neither_file_has(sweep, tmp_path, capsys):
    df = pd.read_csv(sweep)
    df["itl_ms_p99"] = None
    empty = tmp_path / "no_itl.csv"
    df.to_csv(empty, index=False)
    assert main(["--compare", str(empty), str(empty), "--metrics", "itl_ms_p99"]) == 1
    out = capsys.readouterr().out
    assert "NO VALUE in OLD: itl_ms_p99" in out
    # session 23's trial: a missing metric was counted as a missing configuration
    assert "the gate fails: 1 metric value(s) missing on a side" in out and "configuration(s) missing" not in out


def test_runs_with_different_cpu_threads_are_two_configurations(sweep, tmp_path, capsys):
    """Session-7 break test: ``-m cpu_threads=1,2`` was summed up and compared as one configuration (its own
    column, not in ``overrides``, was not a key)."""
    df = pd.read_csv(sweep)
    df = df[(df.control == "shm") & (df.tp == 1)]
    one, two = df.copy(), df.copy()
    one["cpu_threads"], two["cpu_threads"], two["output_tok_s"] = 1, 2, 1.0
    both = tmp_path / "threads.csv"
    pd.concat([one, two]).to_csv(both, index=False)
    assert main([str(both), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "cpu_threads" in out and "1 [1-1]" in out


def test_compare_fails_on_a_configuration_missing_or_failed_in_new(sweep, tmp_path, capsys):
    df = pd.read_csv(sweep)
    missing, failed = tmp_path / "missing.csv", tmp_path / "failed.csv"
    df[df.control != "pipe"].to_csv(missing, index=False)
    broken = df.copy()
    broken.loc[broken.control == "pipe", "status"] = "failed"
    broken.to_csv(failed, index=False)
    assert main(["--compare", sweep, str(missing)]) == 1
    out = capsys.readouterr().out
    assert out.count("MISSING in NEW") == 2 and "control=pipe" in out
    assert main(["--compare", sweep, str(failed)]) == 1
    assert capsys.readouterr().out.count("FAILED  in NEW") == 2
    assert main(["--compare", sweep, str(missing), "--allow-missing"]) == 0
    old_failed = tmp_path / "old_failed.csv"  # session 57's trial: one configuration, two lines, counted twice
    broken.to_csv(old_failed, index=False)
    assert main(["--compare", str(old_failed), str(missing)]) == 1
    out = capsys.readouterr().out
    assert out.count("MISSING in NEW, failed in OLD (no ok row): ") == 2 and "FAILED  in OLD" not in out
    assert "2 configuration(s) missing or failed" in out


def test_compare_fails_on_failed_repeats_in_new_and_says_a_worse_median_inside_the_ranges(sweep, tmp_path, capsys):
    """A new-user trial: NEW with 1 of 2 repeats failed passed, "nothing missing or failed"; NEW at twice the
    TPOT within overlapping ranges passed without a word; a file compared with itself passed silently."""
    df = pd.read_csv(sweep).astype({"error": object}).assign(run_id=lambda d: [f"r{i}" for i in range(len(d))])
    base, failed, slow = tmp_path / "base.csv", tmp_path / "failed.csv", tmp_path / "slow.csv"
    df.to_csv(base, index=False)
    broken = df.copy()
    broken.loc[(broken.control == "shm") & (broken.repeat == 1), ["status", "error"]] = ["failed", "WorkerError: x"]
    broken.to_csv(failed, index=False)
    assert main(["--compare", str(base), str(failed)]) == 1
    out = capsys.readouterr().out
    assert out.count("FAILED  in NEW (1 of 2 repeats): ") == 2 and "2 configuration(s) missing or failed" in out
    assert "warning: OLD and NEW hold 8 of the same runs (run_id)" in out
    assert main(["--compare", str(base), str(failed), "--allow-missing"]) == 0
    capsys.readouterr()
    old, new = df.copy(), df.copy()
    old["tpot_ms_p50"] = [10.0, 30.0] * (len(old) // 2)  # median 20, range 10-30 ...
    new["tpot_ms_p50"] = [25.0, 29.0] * (len(new) // 2)  # ... median 27 (+35%), range 25-29: they overlap
    new["run_id"] = new.run_id.astype(str) + "b"
    old.to_csv(tmp_path / "old.csv", index=False)
    new.to_csv(slow, index=False)
    assert main(["--compare", str(tmp_path / "old.csv"), str(slow), "--threshold", "10%"]) == 0
    out = capsys.readouterr().out
    assert "worse? " in out and "tpot_ms_p50 20 -> 27 (+35.0%" in out and "the spreads overlap, not gated" in out
    assert "WORSE" not in out and "warning: OLD and NEW hold" not in out


def test_compare_across_schemas_ignores_a_column_the_older_file_lacks(sweep, tmp_path, capsys):
    """A schema-7 baseline has no gemm column; a schema-8 run fills it (torch on CPU): the same
    configurations, not all of them missing (found when schema 8 met CI's committed baseline)."""
    old, new = tmp_path / "old.csv", tmp_path / "new.csv"
    df = pd.read_csv(sweep)
    df.drop(columns=["gemm"]).assign(schema_version=7).to_csv(old, index=False)
    df.assign(gemm="torch").to_csv(new, index=False)
    assert main(["--compare", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "note: rows not matched on gemm: one file's schema predates the column" in out and "MISSING" not in out
    # a break test's case: NEW holds two values of the key; the rows of the second (here 3x the calls)
    # must not pool with the first and pass, they are configurations OLD lacks
    worse = df.assign(gemm="cublas", ctrl_calls=df.ctrl_calls * 3)
    both = tmp_path / "both.csv"
    pd.concat([df.assign(gemm="torch"), worse]).to_csv(both, index=False)
    assert main(["--compare", str(old), str(both)]) == 1
    assert "MISSING in NEW" in capsys.readouterr().out


def test_compare_keeps_a_column_both_schemas_have_even_where_one_file_leaves_it_empty(sweep, tmp_path, capsys):
    """Found by a break test: a run with workload overrides (one value of ``overrides``) compared against a
    baseline without any (empty) was matched to it and called 9 metrics WORSE. Empty is a configuration."""
    old, new = tmp_path / "old.csv", tmp_path / "new.csv"
    df = pd.read_csv(sweep)
    df.to_csv(old, index=False)
    df.assign(overrides="workload.num_seqs=16", ctrl_calls=df.ctrl_calls * 4).to_csv(new, index=False)
    assert main(["--compare", str(old), str(new), "--allow-missing"]) == 1  # nothing in common to compare
    out = capsys.readouterr().out
    assert "WORSE" not in out and out.count("NEW only") == 4 and out.count("MISSING in NEW") == 4
    assert "nothing was compared" in out


def test_compare_matches_configurations_across_tags(sweep, tmp_path):
    """tag=baseline against tag=pr-123: the same configurations (a break test found every one MISSING)."""
    old, new = tmp_path / "old.csv", tmp_path / "new.csv"
    df = pd.read_csv(sweep)
    df.assign(tag="baseline").to_csv(old, index=False)
    df.assign(tag="pr-123").to_csv(new, index=False)
    assert main(["--compare", str(old), str(new)]) == 0


def test_compare_never_calls_a_difference_inside_the_repeats_spread(sweep, tmp_path, capsys):
    """Repeats whose ranges overlap are no regression however far the medians move."""
    df = pd.read_csv(sweep)
    old, new = tmp_path / "old.csv", tmp_path / "new.csv"
    a, b = df.copy(), df.copy()
    a["output_tok_s"] = [100.0, 300.0] * (len(a) // 2)  # ranges 100-300 ...
    b["output_tok_s"] = [90.0, 110.0] * (len(b) // 2)   # ... and 90-110: median 200 -> 100, ranges overlap
    a.to_csv(old, index=False)
    b.to_csv(new, index=False)
    assert main(["--compare", str(old), str(new), "--metrics", "output_tok_s"]) == 0
    assert "WORSE" not in capsys.readouterr().out


def test_older_schema_rows_still_load(sweep, tmp_path):
    old = tmp_path / "v1.csv"
    df = pd.read_csv(sweep).drop(columns=["payload", "payload_bytes"])
    df["schema_version"] = 1
    df.to_csv(old, index=False)
    assert main([str(old), sweep]) == 0


@pytest.mark.parametrize("content, message", [
    ("", "empty file"),
    ("a,b\n1,2\n", "missing column"),
    (",".join(__import__("harness.schema", fromlist=["COLUMNS"]).COLUMNS) + "\n", "no whole row (a header only)"),
    # a new-user trial: "missing column(s) ...", and a warning line before the error
    (",".join(__import__("harness.schema", fromlist=["COLUMNS"]).COLUMNS), "not one whole line (a writer died"),
    (",".join(__import__("harness.schema", fromlist=["COLUMNS"]).COLUMNS) + "\n11,2026", "then a truncated line"),
    (b"run_id\xff,\xfe", "not one whole line (a writer died"),  # session 32's trial: a warning line came first
    # a column added to the header by hand: "no whole row (a header only)" for a file of rows
    (",".join(COLUMNS) + ",note\n" + ("1," * (len(COLUMNS) - 1) + "1\n") * 2,
     f"none of its 2 row(s) has the header's {len(COLUMNS) + 1} cells (they have {len(COLUMNS)}): damaged rows, or a "
     "header edited by hand?"),
])
def test_damaged_input_is_a_clear_error(content, message, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.splitlines()) == 1, err


def test_a_truncated_or_damaged_row_is_refused_not_measured(sweep, tmp_path, capsys):
    """A writer that died mid-row leaves a line without its newline: it is dropped with a warning, never
    counted (pandas alone would read it as a row of empty cells); so is a line with too many cells."""
    text = open(sweep).read()
    header, first = text.splitlines()[:2]
    damaged = tmp_path / "damaged.csv"
    damaged.write_text(header + "\n" + first + "\n" + first + ",extra,cells\n" + first[: len(first) // 2])
    assert main([str(damaged)]) == 0
    captured = capsys.readouterr()
    assert "truncated last line" in captured.err and "1 damaged line" in captured.err
    row = next(line for line in captured.out.splitlines() if re.match(r"\|\s+\d\s+\|", line))
    assert re.search(r"\|\s+1\s+\|", row)  # one measurement, not three

    # The next run's writer moves that half row to damaged.csv.partial and appends its own: the half row is
    # still not a measurement (a break test saw it counted as an ok row of empty cells).
    from harness.results_csv import append_row
    from harness.schema import COLUMNS, SCHEMA_VERSION

    append_row(str(damaged), COLUMNS, {"status": "ok", "control": "shm", "tp": 1}, SCHEMA_VERSION)
    assert (tmp_path / "damaged.csv.partial").read_text() == first[: len(first) // 2] + "\n"
    assert main([str(damaged)]) == 0
    captured = capsys.readouterr()
    assert "1 damaged line(s)" in captured.err and "truncated last line" not in captured.err
    row = next(line for line in captured.out.splitlines() if re.match(r"\|\s+\d\s+\|", line))
    assert re.search(r"\|\s+1\s+\|", row)  # one measurement, not three


def test_missing_file_is_a_clear_error(capsys):
    assert main(["/nonexistent.csv"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_a_threshold_of_minus_zero_is_zero():
    """Session 52's trial: --threshold -0 printed "beyond -0%"."""
    from harness.compare import parse_threshold

    assert [str(parse_threshold(t)) for t in ("-0", "-0%", "0")] == ["0.0", "0.0", "0.0"]


@pytest.mark.parametrize("args, message", [
    (["--threshold", "abc"], "--threshold must be"),
    (["--threshold", "nan"], "finite"),
    (["--threshold", "-5%"], "--threshold must be a finite number >= 0, got '-5%'"),  # argparse: "expected one"
    (["--threshold", "1_0%"], "--threshold must be a percentage like 10% or a fraction like 0.1, got '1_0%'"),
    (["--plot", "/nonexistent-dir/x.png"], "does not exist"),
    (["--plot", "/tmp/x.txt"], ".png"),
])
def test_bad_arguments_are_a_clear_error(args, message, sweep, capsys):
    argv = ["--compare", sweep, sweep, *args] if args[0] == "--threshold" else [sweep, *args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("option", [["--threshold", "10%"], ["--threshold", "5%"], ["--allow-missing"],
                                    ["--metrics", "ttft_ms_p50"]])
def test_a_compare_option_without_compare_is_refused_whatever_its_value(option, sweep, capsys):
    # a new-user trial: --threshold 10% (the default's value) passed silently while 5% was refused
    assert main([sweep, *option]) == 2
    assert capsys.readouterr().err == f"error: {option[0]} applies only to --compare OLD NEW\n"


@pytest.mark.parametrize("argv", [["--compare", "SWEEP", "/nonexistent.csv"], ["SWEEP", "--group", "nosuch"]])
def test_an_error_comes_before_any_file_is_listed(argv, sweep, capsys):
    assert main([sweep if a == "SWEEP" else a for a in argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, (out, err)


def test_a_csv_of_other_columns_or_of_a_newer_schema_is_said_so(tmp_path, capsys):
    (tmp_path / "three.csv").write_text("control,tp,status\nshm,2,ok\n")  # once read as a results file: exit 0
    assert main([str(tmp_path / "three.csv")]) == 2
    assert "missing column(s) schema_version; is this a results CSV?" in capsys.readouterr().err
    df = pd.read_csv(tmp_path / "three.csv").assign(schema_version=99)
    df.to_csv(tmp_path / "newer.csv", index=False)
    assert main([str(tmp_path / "newer.csv")]) == 0
    assert "schema_version 99 is newer than this harness's" in capsys.readouterr().err


@pytest.mark.parametrize("below", ["x.png", "sub/x.png"])
def test_a_plot_path_below_a_file_says_it_is_not_a_directory(below, sweep, capsys):
    # a new-user trial: "--plot afile/x.png" said "directory afile does not exist"
    assert main([sweep, "--plot", f"{sweep}/{below}"]) == 2
    assert capsys.readouterr().err == f"error: --plot: {sweep} is not a directory\n"


@pytest.mark.parametrize("argv, message", [
    (["--compare", "only-one.csv"], "expected 2 arguments"),
    (["--bogus", "x.csv"], "unrecognized arguments: --bogus"),
])
def test_usage_errors_are_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr()
    assert exit_.value.code == 2 and err.out == ""
    assert err.err.startswith("error: ") and message in err.err and len(err.err.strip().splitlines()) == 1


def test_plot_path_is_checked_before_the_table_is_printed(sweep, tmp_path, capsys):
    assert main([sweep, "--plot", "/nonexistent-dir/x.png"]) == 2
    assert capsys.readouterr().out == ""
    assert main([sweep, "--plot", "/proc/x.png"]) == 2  # root may write /proc by os.access: was refused after the table
    assert capsys.readouterr().out == ""
    (tmp_path / "d.png").mkdir()
    assert main([sweep, "--plot", str(tmp_path / "d.png")]) == 2  # a directory: was IsADirectoryError
    assert "is a directory" in capsys.readouterr().err


@pytest.mark.parametrize("case", ["every row failed", "unwritable place"])
def test_a_plot_that_cannot_be_drawn_is_one_line_not_a_traceback(case, sweep, tmp_path, capsys):
    """Session-7 break test: matplotlib's ValueError (no ok row) and FileNotFoundError (/proc) escaped."""
    src, out = sweep, "/proc/x.png"
    if case == "every row failed":
        df = pd.read_csv(sweep)
        df["status"] = "failed"
        src, out = str(tmp_path / "failed.csv"), str(tmp_path / "f.png")
        df.to_csv(src, index=False)
    assert main([src, "--plot", out]) == (1 if case == "every row failed" else 2)  # a failed run; a bad place
    err = capsys.readouterr().err.strip().splitlines()
    if case == "every row failed":  # the files read are listed on stderr first
        err = [line for line in err if not line.startswith(("read ", "  "))]
    assert len(err) == 1 and err[0].startswith("error: no ok row" if case == "every row failed" else "error: --plot:")


def test_failed_rows_are_counted_per_configuration(sweep, tmp_path, capsys):
    only_failed = tmp_path / "failed.csv"
    df = pd.read_csv(sweep)
    df["status"] = "failed"
    df.to_csv(only_failed, index=False)
    assert main([str(only_failed)]) == 1  # no ok row at all: exit 1, after the tables
    out = capsys.readouterr().out
    assert out.count("0 (+2 failed)") == 4


def test_no_ratios_when_every_baseline_row_failed_says_so(sweep, tmp_path, capsys):
    """Session-7 leftover: with every shm row failed the header still promised ratios to shm."""
    path = tmp_path / "shm_failed.csv"
    df = pd.read_csv(sweep)
    df.loc[df.control == "shm", "status"] = "failed"
    df.to_csv(path, index=False)
    assert main([str(path), "--baseline", "shm"]) == 0  # by default: a plane with ok rows
    out = capsys.readouterr().out
    assert "(no ratios: every control=shm row failed; none at tp=1 either, where no plane sends)" in out
    assert "ratio to control" not in out


def test_a_median_of_fewer_rows_than_the_repeats_says_of_how_many(sweep, tmp_path, capsys):
    """Session-7 leftover: n=2 with one row lacking a metric showed that metric as if of two rows."""
    path = tmp_path / "one_missing.csv"
    df = pd.read_csv(sweep)
    df.loc[(df.control == "pipe") & (df.tp == 2) & (df.repeat == 1), "ttft_ms_p99"] = None
    df.to_csv(path, index=False)
    assert main([str(path), "--format", "markdown"]) == 0
    lines = capsys.readouterr().out.splitlines()
    cells = [c.strip() for c in next(line for line in lines if line.startswith("|")).strip("|").split("|")]
    pipe2 = [c.strip() for c in next(line for line in lines if re.match(r"\|\s+2\s+\|\s+pipe\s", line))
             .strip("|").split("|")]
    assert pipe2[cells.index("n")] == "2" and pipe2[cells.index("ttft_ms_p99")] == "90 (of 1) (0.99x)"


def test_a_directory_finds_the_rows_diverted_to_other_files(sweep, tmp_path, capsys):
    import shutil

    shutil.copy(sweep, tmp_path / "runs.csv")
    df = pd.read_csv(sweep)
    df["control"] = "ring"
    df.to_csv(tmp_path / "runs.schema9-abcdef12.csv", index=False)
    assert main([str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "runs.schema9-abcdef12.csv" in captured.err and "ring" in captured.out


def test_non_numeric_cells_do_not_crash(sweep, tmp_path, capsys):
    bad = tmp_path / "cells.csv"
    df = pd.read_csv(sweep)
    df["output_tok_s"] = df["output_tok_s"].astype(object)
    df.loc[0, "output_tok_s"] = "fast"
    df.to_csv(bad, index=False)
    text = bad.read_text().splitlines()  # a hand-typed NaN: pandas would read it as an empty cell, unwarned
    bad.write_text("\n".join(text[:2] + [text[2].replace(",29.0,", ",NaN,", 1)] + text[3:]) + "\n")
    assert main([str(bad)]) == 0
    err = capsys.readouterr().err
    assert "ignored 1 non-numeric, NaN, infinite or absurd (beyond ±1e12) cell(s) in column output_tok_s" in err
    assert "ignored 1 non-numeric, NaN, infinite or absurd (beyond ±1e12) cell(s) in column tpot_ms_p50" in err
    # the new-user trial (session 31): 1e300 printed 300-digit numbers, lines of 370 columns, tp=1e+300
    df = pd.read_csv(sweep).astype({"tp": float})
    df.loc[0, "tpot_ms_p50"], df.loc[1, "tp"], df.loc[2, "decode_step_ms_p50"] = 1e300, 1e300, 1e14
    df.to_csv(bad, index=False)
    assert main([str(bad)]) == 0
    out, err = capsys.readouterr()
    assert "absurd (beyond ±1e12) cell(s) in column tpot_ms_p50" in err and "in column tp" in err
    assert "absurd (beyond ±1e12) cell(s) in column decode_step_ms_p50" in err  # 3,000 years
    assert max(map(len, out.splitlines())) <= 120 and "e+300" not in out


def test_negative_cells_are_ignored_where_a_value_cannot_be_negative(sweep, tmp_path, capsys):
    """A hand-edited throughput or latency below 0 is left out with a warning; a launch lag may be negative."""
    bad = tmp_path / "negative.csv"
    df = pd.read_csv(sweep)
    df.loc[0, "output_tok_s"], df.loc[1, "tpot_ms_p50"], df.loc[2, "ctrl_launch_lag_us_mean"] = -400.0, -1.0, -3.0
    df.to_csv(bad, index=False)
    assert main([str(bad), "--format", "csv"]) == 0
    err = capsys.readouterr().err
    assert "ignored 1 negative cell(s) in column output_tok_s" in err and "column tpot_ms_p50" in err
    assert "ctrl_launch_lag" not in err
    df["tp"] = df.tp.astype(float)
    df.loc[0, "tp"], df.loc[1, "tp"] = 0, 2.5  # session 29's break test: both sat in the tables unwarned
    df.to_csv(bad, index=False)
    assert main([str(bad)]) == 0
    out, err = capsys.readouterr()
    assert "ignored 2 cell(s) in column tp that are not a whole number >= 1" in err and "2.5" not in out
    from harness.load_results import load

    rows = load([str(bad)])
    assert pd.isna(rows.output_tok_s[0]) and pd.isna(rows.tpot_ms_p50[1]) and rows.ctrl_launch_lag_us_mean[2] == -3.0


def test_damaged_nodes_and_max_concurrency_cells_are_ignored_not_fatal(sweep, tmp_path, capsys):
    """Session 52's trial: a max_concurrency of 99999999999999999999 (the harness took it then) or a nodes of 2.5
    failed the whole analysis and --compare with pandas' "cannot safely cast non-equivalent float64 to int64"."""
    bad = tmp_path / "counts.csv"
    df = pd.read_csv(sweep, dtype={"max_concurrency": object, "nodes": object})
    df.loc[0, "max_concurrency"], df.loc[1, "max_concurrency"], df.loc[2, "max_concurrency"] = \
        "99999999999999999999", "1.5", "8"
    df.loc[0, "nodes"], df.loc[1, "nodes"] = "2.5", "abc"
    df.to_csv(bad, index=False)
    assert main([str(bad)]) == 0 and main(["--compare", str(bad), str(bad)]) == 0
    err = capsys.readouterr().err
    assert "ignored 1 non-numeric, NaN, infinite or absurd (beyond ±1e12) cell(s) in column max_concurrency" in err
    assert "ignored 1 cell(s) in column max_concurrency that are not a whole number >= 1" in err
    assert "in column nodes that are not a whole number" in err and "beyond ±1e12) cell(s) in column nodes" in err
    from harness.load_results import load

    rows = load([str(bad)])
    assert rows.max_concurrency.isna()[:2].all() and rows.max_concurrency[2] == 8 and rows.nodes.isna()[:2].all()


def test_overrides_spelled_differently_are_one_configuration(sweep, tmp_path, capsys):
    """``++key=v`` and ``key=v`` (how the key got in), ``True`` from a sweep and ``true`` typed: one
    configuration, not two (committed files hold both spellings of the same runs)."""
    from harness.schema import normalize_overrides

    assert normalize_overrides("++workload.iterations=5 llm.async_scheduling=True") == \
        "llm.async_scheduling=true workload.iterations=5"
    assert normalize_overrides("") is None and normalize_overrides(float("nan")) is None
    assert normalize_overrides("workload.request_rate=Inf") == "workload.request_rate=inf"  # a new user's trial
    # session 32's trial: `workload.request_rate=4 workload.request_rate=inf` ran at inf and wrote both
    assert normalize_overrides("workload.request_rate=4 tp=2 workload.request_rate=inf") == \
        "tp=2 workload.request_rate=inf"
    df = pd.read_csv(sweep)
    a, b = df.copy(), df.copy()
    a["overrides"], b["overrides"] = "++workload.iterations=5 llm.async_scheduling=True", \
        "llm.async_scheduling=true workload.iterations=5"
    a.to_csv(tmp_path / "a.csv", index=False)
    b.to_csv(tmp_path / "b.csv", index=False)
    assert main(["--compare", str(tmp_path / "a.csv"), str(tmp_path / "b.csv")]) == 0
    assert "4 configuration(s) compared" in capsys.readouterr().out


def test_rows_of_different_workloads_and_settings_are_never_pooled(sweep, tmp_path, capsys):
    df = pd.read_csv(sweep)
    other = df.copy()
    other["workload"], other["overrides"], other["output_tok_s"] = "latency", "workload.num_seqs=8", 1.0
    bcast = df.copy()  # broadcast rows: a payload, no throughput
    bcast["workload"], bcast["payload"] = "broadcast", "raw-256B"
    bcast["output_tok_s"], bcast["ctrl_oneway_us_p50"] = None, 9.0
    mixed = tmp_path / "mixed.csv"
    pd.concat([df, other, bcast]).to_csv(mixed, index=False)
    assert main([str(mixed), "--plot", str(tmp_path / "mixed.png"), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "workload.num_seqs=8" in out and "workload=broadcast, payload=raw-256B" in out  # a table of its own
    assert "every row of this table (8 of 24): model=" in out  # not a claim about all 24 rows
    assert "1 [1-1]" in out and not re.search(r"\[1-[1-9]\d", out)  # latency's 1.0 tok/s stays apart from smoke's
    assert main(["--compare", str(mixed), str(mixed)]) == 0  # empty payload / overrides cells are keys too


@pytest.mark.parametrize("threshold, code", [("2", 2), ("1", 2), ("0.02", 0), ("2%", 0), ("-1%", 2)])
def test_threshold_is_a_percentage_or_a_fraction(sweep, threshold, code):
    assert main(["--compare", sweep, sweep, f"--threshold={threshold}"]) == code


def test_a_long_configuration_label_is_wrapped_inside_the_figure(sweep, tmp_path, monkeypatch):
    """Session-7 leftover: a row's label (its overrides) ran past the figure's right edge and was cut."""
    import matplotlib.pyplot as plt

    from harness.plots import plot

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    df = pd.read_csv(sweep)
    df["overrides"] = " ".join(f"llm.setting_{i}=value_{i}" for i in range(20))  # ~420 characters
    df = df[df.tp == 2]
    df = df.assign(ttft_ms_p99=None, decode_step_ms_p50=None, ctrl_oneway_us_p50=None)  # 2 panels: a narrow figure
    plot(df, ["overrides", "control"], str(tmp_path / "long.png"))
    fig = figures[0]
    fig.canvas.draw()
    width = fig.bbox.width
    labels = [t for ax in fig.axes for t in ax.texts if "setting_19" in t.get_text()]
    assert labels and all(t.get_window_extent().x1 <= width for t in labels)
    assert labels[0].get_text().count("\n") >= 2


def test_a_group_that_pools_different_configurations_says_so(sweep, capsys):
    """Session 16's trial: ``--group tp`` pooled ideal, shm and ring over three workloads into one line, with no
    word of it."""
    assert main([sweep, "--group", "tp"]) == 0  # all_reduce follows tp (none at 1, gloo at 2): within a group, one
    assert "note: --group tp pools rows that differ in control\n" in capsys.readouterr().out  # was ", all_reduce"
    assert main([sweep, "--group", "tp", "control", "all_reduce"]) == 0
    assert "pools rows" not in capsys.readouterr().out


@pytest.mark.parametrize("group", [["control", "payload"], ["tp", "payload"]])
def test_broadcast_rows_grouped_without_a_key_of_their_table_get_the_generic_one(group, capsys):
    """The broadcast table is a row per (tp, payload) and a column per plane: grouped without one of the three,
    the rows get the generic table (a KeyError traceback before)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    csv = os.path.join(root, "results", "cpu", "broadcast_cpu.csv")
    assert main([csv, "--group", *group]) == 0
    out = capsys.readouterr().out
    assert "one-way latency p50" not in out and "1-way p50 us" in out


def test_a_payload_at_two_sizes_is_two_rows_not_one_pooled_median(tmp_path, capsys):
    """Session 33's second trial: results/h200/ pooled decode-256 of two message formats (6684 and 7219 B, 234
    and 36.1 us) into one cell of 99.4 us and a size no message had. A byte more (a longer pickled counter) is
    the same payload."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rows = pd.read_csv(os.path.join(root, "results", "cpu", "broadcast_cpu.csv"))
    rows = rows[rows.status == "ok"]
    other = rows.assign(run_id=rows.run_id + "x", payload_bytes=rows.payload_bytes * 1.08 // 1,
                        ctrl_oneway_us_p50=rows.ctrl_oneway_us_p50 / 7)
    longer = rows.assign(run_id=rows.run_id + "y", payload_bytes=rows.payload_bytes + 1)
    pd.concat([rows, other, longer]).to_csv(tmp_path / "b.csv", index=False)
    assert main([str(tmp_path / "b.csv")]) == 0
    out, err = capsys.readouterr()
    size = int(rows.payload_bytes[rows.payload == "decode-1"].iloc[0])
    assert f"| decode-1 ({size} B) " in out and f"| decode-1 ({int(size * 1.08)} B) " in out
    assert f"| decode-1 ({size + 1} B) " not in out  # one byte more: the first size's row
    assert "payload(s) come at sizes more than 2% apart (payload_bytes), told apart by size: decode-1" in err


@pytest.mark.parametrize("column", ["payload_bytes", "ctrl_oneway_us_p50"])
def test_broadcast_rows_without_a_metric_leave_its_cells_empty(column, tmp_path, capsys):
    """A metric that no ok row has (ideal's one-way latency, or payload_bytes of an older file) left summary()'s
    table without its column: an AttributeError or KeyError traceback before."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rows = pd.read_csv(os.path.join(root, "results", "cpu", "broadcast_cpu.csv"))
    rows[column] = float("nan")
    rows.to_csv(tmp_path / "b.csv", index=False)
    assert main([str(tmp_path / "b.csv")]) == 0
    out = capsys.readouterr().out
    assert "one-way latency p50" in out and "| decode-1 " in out


@pytest.mark.parametrize("extra", [["--plot", "x.png"], ["--group", "tp"], ["--baseline", "shm"],
                                   ["--format", "csv"]])
def test_options_of_the_table_are_refused_with_compare(sweep, extra, capsys):
    """--compare prints its own table: the table's and figure's options were ignored without a word."""
    assert main(["--compare", sweep, sweep, *extra]) == 2
    assert "does not apply to --compare" in capsys.readouterr().err


def test_no_ratios_says_control_is_not_grouped_when_it_is_not(sweep, capsys):
    """New-user trial: with ``--group workload`` it said "control=shm is not in the data, or control is not a
    grouping column" of a control the rows have."""
    assert main([sweep, "--group", "workload", "--baseline", "shm"]) == 0
    assert "(no ratios to control=shm: control is not a grouping column)" in capsys.readouterr().out
