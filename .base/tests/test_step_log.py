"""Per-step timings (``step_log=true``, harness/step_log.py): the file's columns and its summary, on hand-made
steps, and a real tp=2 run that writes one per timed repeat."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import harness

from engine.step_batch import StepRecord
from harness.step_log import main, summarize, write_step_log


def test_the_summary_splits_the_launch_lag_into_its_three_parts(tmp_path, capsys):
    # rank 0 launches 30 us after its send starts; worker 1 receives at 20 us and launches at 100 us (80 us of
    # its own preparation), worker 2 receives at 10 and launches at 40: worker 1 is the latest, 70 us late
    steps = [StepRecord(True, 4, 64, 0.01, 5_000, 900, 50_000)] + \
        [StepRecord(False, 4, 4, 0.002, 5_000, 300, 30_000) for _ in range(3)]
    recv = {1: {"ns": [1, 20_000, 20_000, 20_000], "launch_ns": [9, 100_000, 100_000, 100_000]},
            2: {"ns": [1, 10_000, 10_000, 10_000], "launch_ns": [9, 40_000, 40_000, 40_000]}}
    path = str(tmp_path / "steps" / "abc.csv")  # write_step_log makes its folder
    write_step_log(path, steps, {"recv": recv})
    df = pd.read_csv(path)
    assert list(df.columns) == ["step", "prefill", "num_seqs", "num_tokens", "duration_us", "message_bytes",
                                "send_us", "r0_launch_us", "r1_oneway_us", "r1_launch_us", "r2_oneway_us",
                                "r2_launch_us"]
    assert df.r1_launch_us.iloc[1] == 100.0 and df.prefill.tolist() == [1, 0, 0, 0]
    text = summarize(path)
    assert "3 decode steps" in text and "launch lag mean +70.0" in text and "100.0% of steps > 50 us late" in text
    assert "= one-way 20.0 + worker's preparation 80.0 - rank 0's send to launch 30.0" in text  # 20 + 80 - 30
    assert main([path]) == 0 and "launch lag" in capsys.readouterr().out
    assert main([str(tmp_path / "missing.csv")]) == 2


def test_without_worker_samples_the_summary_says_so(tmp_path):
    steps = [StepRecord(False, 1, 1, 0.002, 0, 0, None)]
    path = str(tmp_path / "tp1.csv")
    write_step_log(path, steps, {"recv": {}})
    assert "no worker launch samples" in summarize(path)


@pytest.mark.slow
def test_a_run_with_step_log_writes_one_file_per_timed_repeat(tmp_path, model_cache):
    res = harness("tp=2", "control=ring", "workload=smoke", "repeat=2", "step_log=true", "progress=false",
                  f"results_dir={tmp_path}", cache=model_cache)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = pd.read_csv(tmp_path / "runs.csv")
    for run_id, decode_steps in zip(rows.run_id, rows.decode_steps):
        steps = pd.read_csv(tmp_path / "steps" / f"{run_id}.csv")
        assert (steps.prefill == 0).sum() == decode_steps and steps.r1_oneway_us.notna().all()
        assert "launch lag" in summarize(str(tmp_path / "steps" / f"{run_id}.csv"))
    assert "steps       " in res.stdout  # the summary names the file


def test_a_file_that_is_no_step_log_is_one_line_not_a_traceback(tmp_path, capsys):
    """Session-8 break test: an empty file, a results CSV and binary data gave tracebacks; a directory was
    "no such file"; one bad file stopped the files after it."""
    empty, other, binary = tmp_path / "empty.csv", tmp_path / "runs.csv", tmp_path / "bin.csv"
    empty.write_text("")
    other.write_text("run_id,status\nabc,ok\n")
    binary.write_bytes(bytes(range(256)) * 4)
    for bad in (empty, other, binary, tmp_path):
        capsys.readouterr()
        assert main([str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error:") and len(err.strip().splitlines()) == 1, err
    assert "a directory" in (main([str(tmp_path)]), capsys.readouterr().err)[1]
    # a new-user trial: a results CSV gave "AttributeError: 'DataFrame' object has no attribute 'prefill'"
    assert main([str(other)]) == 2
    assert capsys.readouterr().err == (f"error: {other}: a results CSV, not a step log (python -m harness.analyze "
                                       f"reads it)\n")


def test_a_damaged_step_log_says_where(tmp_path, capsys):
    """The new-user trial (session 24): a file cut mid-line was summed with its partial line; a short row gave
    "All-NaN slice encountered"; a parser error lost its closing parenthesis."""
    path = str(tmp_path / "steps.csv")
    write_step_log(path, [StepRecord(False, 2, 2, 1e-3, 5_000, 100, 9_000)] * 3,
                   {"recv": {1: {"ns": [20_000] * 3, "launch_ns": [30_000] * 3}}})
    text = open(path).read()
    with open(path, "w") as f:
        f.write(text[:-4])  # the last line cut
    assert main([path]) == 0
    out, err = capsys.readouterr()
    assert f"warning: {path}: ignored its truncated last line" in err and "2 decode steps" in out
    with open(path, "w") as f:
        f.write(text.replace("\n", "\n1,0\n", 1))  # a short second line
    assert main([path]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {path}: not a readable step log (ValueError: line 2 has 2 cells, the header 10)"
