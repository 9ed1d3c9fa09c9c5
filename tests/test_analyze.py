"""python -m harness.analyze: table, plot, compare (exit 1 on a regression), damaged input."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from harness.analyze import main
from test_harness_cli import harness


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, model_cache) -> str:
    """The issue's sweep: -m control=shm,pipe tp=1,2 workload=smoke, two repeats each -> 8 rows."""
    out = tmp_path_factory.mktemp("sweep")
    res = harness("-m", "control=shm,pipe", "tp=1,2", "workload=smoke", "repeat=2", f"results_dir={out}",
                  "progress=false", cache=model_cache)
    assert res.returncode == 0, res.stderr[-2000:]
    return str(out / "runs.csv")


def test_sweep_gives_one_row_per_job_and_repeat(sweep):
    df = pd.read_csv(sweep)
    assert len(df) == 8 and set(zip(df.control, df.tp)) == {("shm", 1), ("shm", 2), ("pipe", 1), ("pipe", 2)}
    assert sorted(df.repeat.unique()) == [0, 1]


def test_table_and_plot(sweep, tmp_path, capsys):
    png = tmp_path / "plot.png"
    assert main([sweep, "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "| tp | control" in out.replace("  ", " ") or "control" in out
    assert "(1.00x)" in out  # shm against itself
    assert png.stat().st_size > 10_000


def test_compare_flags_halved_throughput_and_passes_identical(sweep, tmp_path, capsys):
    assert main(["--compare", sweep, sweep]) == 0
    worse = tmp_path / "worse.csv"
    df = pd.read_csv(sweep)
    df["output_tok_s"] /= 2
    df.to_csv(worse, index=False)
    assert main(["--compare", sweep, str(worse), "--threshold", "10%"]) == 1
    assert "WORSE" in capsys.readouterr().out


def test_older_schema_rows_still_load(sweep, tmp_path):
    old = tmp_path / "v1.csv"
    df = pd.read_csv(sweep).drop(columns=["payload", "payload_bytes"])
    df["schema_version"] = 1
    df.to_csv(old, index=False)
    assert main([str(old), sweep]) == 0


@pytest.mark.parametrize("content, message", [
    ("", "empty file"),
    ("control,tp,status\nshm,2,ok\nshm,2,o", "truncated"),
    ("a,b\n1,2\n", "missing column"),
])
def test_damaged_input_is_a_clear_error(content, message, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    assert main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_missing_file_is_a_clear_error(capsys):
    assert main(["/nonexistent.csv"]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--threshold", "abc"], "--threshold must be"),
    (["--threshold", "nan"], "finite"),
    (["--plot", "/nonexistent-dir/x.png"], "does not exist"),
    (["--plot", "/tmp/x.txt"], ".png"),
])
def test_bad_arguments_are_a_clear_error(args, message, sweep, capsys):
    argv = ["--compare", sweep, sweep, *args] if args[0] == "--threshold" else [sweep, *args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_non_numeric_cells_do_not_crash(sweep, tmp_path):
    bad = tmp_path / "cells.csv"
    df = pd.read_csv(sweep)
    df["output_tok_s"] = df["output_tok_s"].astype(object)
    df.loc[0, "output_tok_s"] = "fast"
    df.to_csv(bad, index=False)
    assert main([str(bad)]) == 0


def test_rows_of_different_workloads_and_settings_are_never_pooled(sweep, tmp_path, capsys):
    df = pd.read_csv(sweep)
    other = df.copy()
    other["workload"], other["overrides"], other["output_tok_s"] = "latency", "workload.num_seqs=8", 1.0
    bcast = df.copy()  # broadcast rows: a payload, no throughput
    bcast["workload"], bcast["payload"], bcast["output_tok_s"], bcast["ctrl_oneway_us_p50"] = "broadcast", "raw-256B", None, 9.0
    mixed = tmp_path / "mixed.csv"
    pd.concat([df, other, bcast]).to_csv(mixed, index=False)
    assert main([str(mixed), "--plot", str(tmp_path / "mixed.png")]) == 0
    out = capsys.readouterr().out
    assert "workload.num_seqs=8" in out and "raw-256B" in out
    assert "1 [1-1]" in out and not re.search(r"\[1-[1-9]\d", out)  # latency's 1.0 tok/s stays apart from smoke's
    assert main(["--compare", str(mixed), str(mixed)]) == 0  # empty payload / overrides cells are keys too


@pytest.mark.parametrize("threshold, code", [("2", 2), ("0.02", 0), ("2%", 0), ("-1%", 2)])
def test_threshold_is_a_percentage_or_a_fraction(sweep, threshold, code):
    assert main(["--compare", sweep, sweep, f"--threshold={threshold}"]) == code
