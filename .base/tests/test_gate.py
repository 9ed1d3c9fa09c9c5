"""python -m harness.analyze --compare: what session 35's gate trial found. More repeats must not hide a regression;
a damaged baseline, a truncated file and rows of several commits must not pass unseen."""

from __future__ import annotations

import pandas as pd
import pytest
from test_analyze_inputs import sweep_rows, write

from harness.analyze import main


def repeats(tpots: list[float], run: str, **cells) -> list[dict]:
    """shm at tp=2 once per value of ``tpots`` (its TPOT p50), the rest of the row as ``sweep_rows`` makes it."""
    base = sweep_rows(planes=("shm",), tps=(2,), repeats=1)[0]
    return [{**base, "repeat": i, "run_id": f"{run}{i}", "tpot_ms_p50": t, **cells} for i, t in enumerate(tpots)]


def gate(tmp_path, capsys, old: list[dict], new: list[dict], *argv: str) -> tuple[int, str]:
    code = main(["--compare", write(old, tmp_path / "old.csv"), write(new, tmp_path / "new.csv"),
                 "--metrics", "tpot_ms_p50", *argv])
    return code, capsys.readouterr().out


def test_one_outlier_among_many_repeats_does_not_hide_a_regression(tmp_path, capsys):
    """10 repeats at ~20 ms and one at 25, against 10 at ~24 (+20%): min-max ranges overlap and it passed; 3 repeats
    of the same failed. From 5 repeats a side's spread is its middle half."""
    old = repeats([20 + 0.1 * (i % 5) for i in range(10)] + [25.0], "a")
    new = repeats([24 + 0.1 * (i % 5) for i in range(10)], "b")
    code, out = gate(tmp_path, capsys, old, new, "--threshold", "5%")
    assert code == 1 and "WORSE " in out and "tpot_ms_p50 20.2 -> 24.2" in out
    # fewer than 5 repeats: [min, max] as before, so the 25 ms repeat makes the spreads overlap
    code, out = gate(tmp_path, capsys, old[:3] + old[-1:], new[:4], "--threshold", "5%")
    assert code == 0 and "worse? " in out and "the spreads overlap, not gated" in out
    code, out = gate(tmp_path, capsys, old, repeats([20 + 0.1 * (i % 5) for i in range(10)], "b"))
    assert code == 0 and "WORSE" not in out and "worse?" not in out  # no change, no verdict


def test_a_baseline_without_a_value_fails_the_gate_as_new_does(tmp_path, capsys):
    old = repeats([20.0, 20.1, 20.2], "a", tpot_ms_p50=None)
    code, out = gate(tmp_path, capsys, old + repeats([9.0], "z", tp=4), repeats([30.0] * 3, "b")
                     + repeats([9.0], "y", tp=4))
    assert code == 1 and "NO VALUE in OLD: tpot_ms_p50 of control=shm, tp=2" in out
    assert "1 metric value(s) missing on a side" in out
    code, out = gate(tmp_path, capsys, old + repeats([9.0], "z", tp=4), repeats([30.0] * 3, "b")
                     + repeats([9.0], "y", tp=4), "--allow-missing")
    assert code == 0 and "NO VALUE in OLD" in out


@pytest.mark.parametrize("damage", ["truncated", "a short line", "an edited row of the same run"])
def test_lines_lost_from_a_file_fail_the_gate(damage, tmp_path, capsys):
    """A row lost to a crash (a truncated last line), a damaged line and two rows of one run_id with other values
    passed as "nothing missing or failed"."""
    old, new = repeats([20.0, 20.1, 20.2], "a"), repeats([20.0, 20.1, 20.2], "b")
    path = write(new, tmp_path / "new.csv")
    text = open(path).read()
    if damage == "truncated":
        text = text[:-40]
    elif damage == "a short line":
        text += "1,2,3\n"
    else:
        text += text.splitlines()[1].replace(",20.0,", ",29.0,", 1) + "\n"
    open(path, "w").write(text)
    code = main(["--compare", write(old, tmp_path / "old.csv"), path, "--metrics", "tpot_ms_p50"])
    out = capsys.readouterr().out
    assert code == 1 and "DAMAGED NEW: " in out and "1 file(s) with lines lost" in out
    assert main(["--compare", str(tmp_path / "old.csv"), path, "--metrics", "tpot_ms_p50", "--allow-missing"]) == 0


def test_rows_of_several_commits_or_machines_are_said(tmp_path, capsys):
    old = repeats([20.0, 20.1, 20.2], "a", git_commit="abc1234", host="ci-1", torch_version="2.13.0", cuda_version=None)
    new = repeats([20.0, 20.1], "b", git_commit="abc1234", host="ci-2", torch_version="2.14.1")
    new += repeats([20.2], "c", git_commit="def5678", host="ci-2", torch_version="2.14.1")
    new = [{**r, "cuda_version": "13.0"} for r in new]
    code, out = gate(tmp_path, capsys, old, new)
    out = " ".join(out.split())
    assert code == 0 and "warning: NEW holds ok rows of 2 commits (abc1234, def5678): their repeats are pooled" in out
    assert "note: OLD and NEW ran on other machines or software: host ci-1 -> ci-2; cuda_version (none) -> 13.0; " \
        "torch_version 2.13.0 -> 2.14.1" in out and "OLD holds" not in out


def test_fewer_repeats_is_no_warning_for_counts_that_do_not_vary(tmp_path, capsys):
    rows = repeats([20.0], "a")
    old, new = write(rows, tmp_path / "old.csv"), write(repeats([20.0], "b"), tmp_path / "new.csv")
    assert main(["--compare", old, new, "--metrics", "ctrl_bytes_mean", "ctrl_calls", "--threshold", "0%"]) == 0
    assert "fewer than 3 repeats" not in capsys.readouterr().out
    assert main(["--compare", old, new, "--metrics", "tpot_ms_p50,ctrl_calls"]) == 0
    assert "fewer than 3 repeats" in capsys.readouterr().out


@pytest.mark.parametrize("argv, says", [
    (["--threshold", ""], "--threshold must be a percentage like 10% or a fraction like 0.1, got ''"),  # unset $VAR
    (["--metrics", "tpot_p50"], "--metrics: tpot_p50 is not comparable (did you mean tpot_ms_p50?)"),
])
def test_an_empty_threshold_or_a_near_miss_metric_is_one_line(argv, says, tmp_path, capsys):
    rows = write(repeats([20.0], "a"), tmp_path / "a.csv")
    assert main(["--compare", rows, rows, *argv]) == 2
    assert capsys.readouterr().err.strip() == f"error: {says}"


def test_group_takes_commas_as_metrics_does(tmp_path, capsys):
    path = write(sweep_rows(planes=("ideal", "shm"), repeats=1), tmp_path / "runs.csv")
    assert main([path, "--group", "tp,control"]) == 0
    by_commas = capsys.readouterr().out
    assert main([path, "--group", "tp", "control"]) == 0
    assert capsys.readouterr().out == by_commas and "| shm" in by_commas


def test_the_spread_is_the_middle_half_from_five_repeats():
    from harness.compare import spreads

    df = pd.DataFrame({"k": ["a"] * 5 + ["b"] * 4, "m": [1.0, 2.0, 3.0, 4.0, 100.0, 1.0, 2.0, 3.0, 100.0]})
    low, high = spreads(df.groupby("k")[["m"]], ["m"])
    assert (low.at["a", "m"], high.at["a", "m"]) == (2.0, 4.0)  # numpy's 25th and 75th percentiles
    assert (low.at["b", "m"], high.at["b", "m"]) == (1.0, 100.0)  # 4 repeats: all of them


def test_a_count_that_moved_in_any_repeat_fails_either_way(tmp_path, capsys):
    """Session 35's CI trial: ctrl_calls and ctrl_bytes_mean, the same in every repeat, passed when 2 of 3 NEW repeats
    sent 196% more bytes (the spreads overlapped) and when one repeat made one call fewer, without a line."""
    old = repeats([20.0] * 3, "a", ctrl_calls=8, ctrl_bytes_mean=134.875)
    more = [{**r, "ctrl_bytes_mean": 400.0} if r["repeat"] else r for r in repeats([20.0] * 3, "b", ctrl_calls=8,
                                                                                 ctrl_bytes_mean=134.875)]
    code, out = gate(tmp_path, capsys, old, more, "--metrics", "ctrl_bytes_mean", "--threshold", "0%")
    assert code == 1 and "CHANGED control=shm, tp=2: ctrl_bytes_mean 134.875 -> 134.875-400" in out, out
    fewer = [{**r, "ctrl_calls": 7} if r["repeat"] == 1 else r for r in repeats([20.0] * 3, "c", ctrl_calls=8,
                                                                                ctrl_bytes_mean=134.875)]
    code, out = gate(tmp_path, capsys, old, fewer, "--metrics", "ctrl_calls", "--threshold", "0%")
    assert code == 1 and "CHANGED control=shm, tp=2: ctrl_calls 8 -> 7-8" in out, out
    code, out = gate(tmp_path, capsys, old, repeats([20.0] * 3, "d", ctrl_calls=8, ctrl_bytes_mean=134.875),
                     "--metrics", "ctrl_calls,ctrl_bytes_mean", "--threshold", "0%")
    assert code == 0 and "CHANGED" not in out
    code, out = gate(tmp_path, capsys, repeats([20.0] * 3, "e", ctrl_calls=0), repeats([20.0] * 3, "f", ctrl_calls=2),
                     "--metrics", "ctrl_calls", "--threshold", "0%")
    assert code == 1 and "CHANGED control=shm, tp=2: ctrl_calls 0 -> 2" in out, out  # from 0: no % to take


def test_a_column_one_files_schema_predates_is_named_in_a_note(tmp_path, capsys):
    """The new-user trial (session 36): "(not compared, filled in one file only and there one value throughout:
    gemm)" came first, alone, in no sentence."""
    old = repeats([20.0, 20.1, 20.2], "a", schema_version=7, gemm=None)
    new = repeats([20.0, 20.1, 20.2], "b", gemm="torch")
    code, out = gate(tmp_path, capsys, old, new)
    assert code == 0 and ("note: rows not matched on gemm: one file's schema predates the column, and the other "
                          "holds one value in it") in out
