"""python -m harness.analyze: which files it read (and skipped), the default baseline, tables of at most 120
columns, --format csv. No process is run: the rows are made here."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys

import pandas as pd
import pytest

from harness.analyze import main, print_sweep_summary
from harness.schema import COLUMNS, SCHEMA_VERSION
from harness.summary_table import FULL_METRICS

PLANES = ("ideal", "shm", "queue", "pipe", "ring", "gloo", "zmq", "hybrid")


def sweep_rows(planes=PLANES, tps=(2, 4), repeats=3) -> list[dict]:
    """``-m control=<planes> tp=2,4 workload=latency repeat=3`` on GPUs: 5-digit throughput, every metric."""
    rows = []
    for i, control in enumerate(planes):
        for tp in tps:
            for repeat in range(repeats):
                step = 1.66 * (1 + 0.03 * i) * (1 + 0.01 * repeat)
                ideal = control == "ideal"
                rows.append({"schema_version": SCHEMA_VERSION, "status": "ok", "engine": "tp", "control": control,
                             "tp": tp, "model": "qwen3-0.6b", "device": "cuda", "dtype": "bfloat16",
                             "all_reduce": "symm_mem", "workload": "latency", "seed": 0, "repeat": repeat,
                             "overrides": "llm.async_scheduling=false workload.iterations=5",
                             "output_tok_s": 23130.0 / step, "total_tok_s": 30000.0 / step, "req_s": 12.5 / step,
                             "ttft_ms_p99": 12.0 + repeat, "tpot_ms_p50": step, "tpot_ms_p99": 1.2 * step,
                             "itl_ms_p99": 1.3 * step, "e2el_ms_p99": 240.0 * step, "decode_step_ms_p50": step,
                             "decode_step_ms_p99": 1.1 * step, "ctrl_calls": 130, "ctrl_bytes_mean": 4812.0,
                             "ctrl_oneway_us_p50": None if ideal else 45.0 * (i + 1) + repeat,
                             "ctrl_oneway_us_p99": None if ideal else 1234.5 * (i + 1),
                             "ctrl_send_us_p50": None if ideal else 12.0, "ctrl_launch_late_us_mean": 30.0 - repeat,
                             "ctrl_launch_lag_us_mean": -3.0 + repeat, "ctrl_launch_lag_us_p50": -1.5,
                             "ttft_ms_mean": 10.0, "ttft_ms_p50": 9.0, "tpot_ms_mean": step, "itl_ms_mean": step,
                             "itl_ms_p50": step, "e2el_ms_mean": 200.0 * step, "e2el_ms_p50": 200.0 * step,
                             "ttft_ms_p90": 11.0, "ttft_ms_std": 1.0})
    return rows


def write(rows: list[dict], path) -> str:
    pd.DataFrame(rows).reindex(columns=COLUMNS).to_csv(path, index=False)
    return str(path)


@pytest.fixture
def folder(tmp_path):
    """A results folder: runs.csv (8 ok rows, 1 failed) and another tool's CSV beside it."""
    rows = sweep_rows(planes=("ideal", "shm"), repeats=2)
    rows[0]["status"] = "failed"
    write(rows, tmp_path / "runs.csv")
    (tmp_path / "nvidia-smi.csv").write_text("timestamp, utilization.gpu [%]\n2026/01/01 10:00:00, 97 %\n")
    return tmp_path


def test_each_file_read_and_skipped_is_listed_and_a_foreign_csv_in_a_folder_is_not_fatal(folder, capsys):
    assert main([str(folder)]) == 0
    out, err = capsys.readouterr()  # the files on stderr: a table sent to a file holds no listing (session 35)
    assert f"read {folder / 'runs.csv'}: 8 row(s), 7 ok, 1 failed" in err and "\nread " not in out
    assert f"skipped {folder / 'nvidia-smi.csv'}: missing column(s) schema_version, control, tp, status" in err
    assert "| ideal" in out and "exposed cost" in out  # the rest analysed


@pytest.mark.parametrize("content", [b"\xff\xfe\x00garbage\n", b"", b"control,tp,status\n", b'control,tp\n"x,1\n'])
def test_a_damaged_csv_in_a_folder_is_skipped(content, folder, capsys):
    (folder / "nvidia-smi.csv").unlink()
    (folder / "broken.csv").write_bytes(content)
    assert main([str(folder)]) == 0
    err = capsys.readouterr().err
    assert f"skipped {folder / 'broken.csv'}: " in err and "read " in err


def test_a_directory_named_like_a_csv_in_a_folder_is_skipped(folder, capsys):
    """A new-user trial: a directory x.csv beside runs.csv ended in an IsADirectoryError traceback."""
    (folder / "x.csv").mkdir()
    assert main([str(folder)]) == 0
    err = capsys.readouterr().err
    assert f"skipped {folder / 'x.csv'}: cannot read it (Is a directory)" in err and "read " in err


def test_a_fifo_named_like_a_csv_is_skipped_not_read(folder, capsys):
    """Session 29's break test: a FIFO runs.csv in a folder hung the analysis; named, it was "no such file"."""
    os.mkfifo(folder / "pipe.csv")
    assert main([str(folder)]) == 0
    assert f"note: skipped {folder / 'pipe.csv'}: not a regular file" in capsys.readouterr().err
    assert main([str(folder / "pipe.csv")]) == 2
    assert capsys.readouterr().err == f"error: {folder / 'pipe.csv'}: not a regular file\n"


def test_a_foreign_csv_named_on_the_command_line_is_an_error_of_one_line(folder, capsys):
    assert main([str(folder / "runs.csv"), str(folder / "nvidia-smi.csv")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"error: {folder / 'nvidia-smi.csv'}: missing column(s)")


def test_a_folder_of_foreign_csvs_only_is_an_error_of_one_line(folder, capsys):
    (folder / "runs.csv").unlink()
    assert main([str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no results CSV among") and err.count("\n") == 1 and "nvidia-smi.csv" in err


@pytest.mark.parametrize("planes, argv, baseline", [
    (PLANES, [], "ideal"), (("zmq", "shm", "ring"), [], "shm"), (("zmq", "ring"), [], "ring"),
    (PLANES, ["--baseline", "ring"], "ring")])
def test_the_default_baseline_is_ideal_else_shm_else_the_first_plane_and_is_named(planes, argv, baseline, tmp_path,
                                                                                  capsys):
    assert main([write(sweep_rows(planes), tmp_path / "runs.csv"), *argv]) == 0
    out = capsys.readouterr().out
    assert f"ratios to control={baseline} " in out
    base = next(line for line in out.splitlines() if line.startswith(f"|    2 | {baseline} "))  # the summary's
    assert base.count("1.00x") >= 3 and base.count("x |") == base.count("1.00x")  # every ratio: against itself


def test_the_default_tables_fit_in_120_columns(tmp_path, capsys):
    """8 planes x 2 tp x 3 repeats with ideal: the summary and the exposed-cost tables, and the sweep's end."""
    rows = sweep_rows()
    assert main([write(rows, tmp_path / "runs.csv")]) == 0
    out = capsys.readouterr().out
    print_sweep_summary(rows, jobs=16)
    end = capsys.readouterr().out
    for text in (out, end):
        lines = text.splitlines()
        assert max(len(line.encode()) for line in lines) <= 120  # bytes, as awk counts "±"
        assert sum(line.startswith("|    4 |") for line in lines) == 8 + 7 * 2  # 8 planes, 7 x 2 exposed rows
        assert "ratios to control=ideal" in text and "within noise" in text
        header = next(line for line in lines if line.startswith("|"))
        assert [c.strip() for c in header.strip("|").split("|")][:4] == ["tp", "control", "n", "tok/s"]


def test_format_csv_is_one_parseable_csv_with_every_metric(tmp_path, capsys):
    assert main([write(sweep_rows(), tmp_path / "runs.csv"), "--format", "csv"]) == 0
    captured = capsys.readouterr()
    assert "read " in captured.err  # the listing: not in the CSV
    df = pd.read_csv(io.StringIO(captured.out))
    summary = df[df.table == "summary"]
    assert len(summary) == 16 and set(summary.baseline) == {"ideal"} and (summary.n == 3).all()
    for m in FULL_METRICS:
        assert summary[f"{m}_median"].notna().any(), m
    assert summary.loc[summary.control == "ideal", "tpot_ms_p50_vs_ideal"].tolist() == [1.0, 1.0]
    exposed = df[df.table == "exposed"]
    assert len(exposed) == 2 * 7 * 2 and {"exposed_us", "low_us", "high_us", "verdict"} <= set(df.columns)
    # a new-user trial: the settings every row shares (text: "every row: ...") were in no column
    assert (df.workload == "latency").all() and (df.model == "qwen3-0.6b").all() and (df.device == "cuda").all()


def test_format_markdown_gives_every_metric_in_full_cells(tmp_path, capsys):
    assert main([write(sweep_rows(), tmp_path / "runs.csv"), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    header = [c.strip() for c in next(line for line in out.splitlines() if line.startswith("|")).split("|")]
    assert set(FULL_METRICS) <= set(header) and "spread_us" in out and "(1.00x)" in out
    # a new-user trial: the docs said "every metric"; mean and median TTFT/TPOT/ITL are there, p90 and std not
    assert {"ttft_ms_mean", "ttft_ms_p50", "tpot_ms_mean", "itl_ms_mean", "itl_ms_p50"} <= set(header)
    assert not {"ttft_ms_p90", "ttft_ms_std"} & set(header)


def test_a_ratio_under_a_hundredth_is_not_printed_as_zero():
    """A new-user trial: ideal's queue p99 of 0.23 ms against shm's 49.9 printed "(0.00x)" in markdown."""
    from harness.text_tables import ratio

    assert [ratio(v) for v in (0.23 / 49.9, 0.005, 0.0, 0.99, 13.6)] == ["<0.01x", "0.01x", "0.00x", "0.99x", "13.6x"]


@pytest.mark.parametrize("argv, says", [
    (["--baseline", "shmm"], "--baseline shmm: no such control in the rows (they have gloo, hybrid, ideal,"),
    (["--group", "contrl"], "unknown --group column(s): contrl; configuration columns: engine, control, tp"),
    (["--group", "output_tok_s"], "unknown --group column(s): output_tok_s; configuration columns: engine"),
    (["--group", "tp", "tp"], "--group: tp given twice"),
    (["--group", ""], "--group: give at least one configuration column"),  # session 57's trial: taken as no --group
    (["--group", ","], "--group: give at least one configuration column"),
    # a new-user trial: an empty value was taken for no option (exit 0, no figure, not a word)
    (["--plot", ""], "--plot: give a .png, .pdf or .svg file name, got ''"),
    (["--plot", ".png"], "--plot: give a .png, .pdf or .svg file name, got '.png'"),  # session 52: a traceback
    (["--baseline", ""], "--baseline '': no such control in the rows (they have gloo, hybrid, ideal,"),
])
def test_a_typo_in_an_option_is_refused_with_what_there_is(tmp_path, capsys, argv, says):
    assert main([write(sweep_rows(), tmp_path / "runs.csv"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {says}")


@pytest.mark.parametrize("before, after", [([], ["--group", "nonexistent"]), (["--group", "nonexistent"], []),
                                           (["--format", "csv", "--group", "nonexistent"], ["--format", "text"])])
def test_a_file_after_group_is_a_file_not_a_column(tmp_path, capsys, before, after):
    """``--group nonexistent FILE`` (nargs takes FILE too) said "give at least one CSV file", not the column."""
    assert main([*before, write(sweep_rows(), tmp_path / "runs.csv"), *after]) == 2
    assert capsys.readouterr().err.startswith("error: unknown --group column(s): nonexistent; configuration columns:")
    assert main(["--group", "tp", "control", write(sweep_rows(), tmp_path / "b.csv"), str(tmp_path / "runs.csv")]) == 0
    assert capsys.readouterr().err.startswith(f"read {tmp_path / 'b.csv'}: 48 row(s)")


@pytest.mark.slow
def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path):
    import subprocess
    import sys

    from helpers import ROOT

    path = write(sweep_rows(tps=tuple(range(1, 41))), tmp_path / "runs.csv")  # more than a pipe's 64 KiB
    cmd = f"{sys.executable} -m harness.analyze {path} --format markdown | head -1"
    res = subprocess.run(cmd, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.stdout.strip() and "Traceback" not in res.stderr and "BrokenPipe" not in res.stderr
    assert res.stderr.startswith("read ")  # the files read on stderr, only tables in a file


@pytest.mark.slow
def test_a_reader_that_leaves_early_changes_no_outcome(tmp_path):
    """The new-user trial (session 31): `--compare OLD NEW | head -1` exited 0 where the gate failed (exit 1), and
    `--plot OUT | head -1` wrote no figure. Stdout on a full disk gave a traceback."""
    import subprocess
    import sys

    from helpers import ROOT

    rows = sweep_rows(tps=tuple(range(1, 41)))  # more than a pipe's 64 KiB of output
    old, new = write(rows, tmp_path / "old.csv"), write([{**r, "tpot_ms_p50": 2 * r["tpot_ms_p50"]} for r in rows],
                                                         tmp_path / "new.csv")
    small = write(sweep_rows(), tmp_path / "small.csv")  # the figures of 960 rows take 10 s
    analyze = f"{sys.executable} -m harness.analyze"

    def shell(cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", cmd], cwd=ROOT, capture_output=True, text=True, timeout=120)

    res = shell(f"{analyze} --compare {old} {new} | head -1; exit ${{PIPESTATUS[0]}}")
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    res = shell(f"{analyze} {small} --plot {tmp_path / 'out.png'} | head -1; exit ${{PIPESTATUS[0]}}")
    assert res.returncode == 0 and (tmp_path / "out.png").exists() and (tmp_path / "out_raw.png").exists()
    res = shell(f"{analyze} {small} --plot {tmp_path / 'full.png'} > /dev/full")  # the tables lost: exit 1
    assert res.returncode == 1 and res.stderr.strip().splitlines()[-1] == (
        "warning: cannot write stdout (No space left on device): the rest of the printout is lost"), res.stderr
    assert (tmp_path / "full.png").exists() and (tmp_path / "full_raw.png").exists()
    res = shell(f"{analyze} --compare {old} {new} >&-")  # a closed stdout: print() writes nothing
    assert res.returncode == 1 and all(line.startswith("read ") for line in res.stderr.splitlines()), res.stderr


@pytest.mark.parametrize("plot", [False, True])
def test_only_failed_rows_print_the_tables_and_exit_1_not_as_bad_input(plot, tmp_path, capsys):
    """Sessions 32-33: a readable file whose runs all failed printed its tables, then exited 2 with --plot (the
    code for unreadable input) and 0 without (a CI step passed on runs that made nothing). Exit 1 both ways, as
    the runs and the gate do."""
    rows = [{**r, "status": "failed", "error": "RuntimeError: boom"} for r in sweep_rows(planes=("ideal", "shm"),
                                                                                            repeats=1)]
    png = tmp_path / "f.png"
    assert main([write(rows, tmp_path / "runs.csv")] + ["--plot", str(png)] * plot) == 1
    out, err = capsys.readouterr()
    assert "0 (+1 failed)" in out and "RuntimeError: boom" in err
    assert err.strip().splitlines()[-1] == "error: no ok row: every run failed" + f"; {png} not written" * plot
    assert not png.exists()


def test_ideals_one_way_written_as_0_by_older_files_reads_as_empty(tmp_path, capsys):
    """Session 33's second trial: older files (results/h200x2/) wrote 0 for ideal's one-way latency, which fresh
    rows leave empty (no transport): the tables showed a measured 0, and a gate from such a file to a fresh one
    failed on "NO VALUE in NEW"."""
    fresh = sweep_rows(planes=("ideal", "shm"))
    older = [{**r, **({"ctrl_oneway_us_p50": 0.0, "ctrl_oneway_us_p99": 0.0} if r["control"] == "ideal" else {}),
              "run_id": f"old{i}"} for i, r in enumerate(fresh)]
    old, new = write(older, tmp_path / "old.csv"), write(fresh, tmp_path / "new.csv")
    assert main([old]) == 0
    (ideal_row,) = [line for line in capsys.readouterr().out.splitlines() if "| ideal " in line][:1]
    assert not ideal_row.rstrip(" |").endswith(" 0")
    assert main(["--compare", old, new]) == 0
    assert capsys.readouterr().out.strip().endswith("the gate passes")


def test_configurations_of_one_plane_each_get_no_ratios_to_themselves(tmp_path, capsys):
    """Session 33's new-user trial: results/h200/ printed "ratios to control=shm" and then 1.00x in every cell of
    eleven tables whose configurations (tags) each held shm alone."""
    rows = [{**r, "tag": f"v{i}"} for i, r in enumerate(sweep_rows(planes=("shm",), tps=(2,), repeats=1) * 3)]
    rows.append({**rows[0], "control": "ring", "tag": "other"})  # a second plane, never beside shm
    assert main([write(rows, tmp_path / "runs.csv")]) == 0
    out = capsys.readouterr().out
    assert "(no ratios: no configuration has control=shm beside another plane)" in out
    assert "1.00x" not in out and "ratios to control=shm" not in out


def test_rows_without_metrics_say_so_not_that_ideal_is_missing(tmp_path, capsys):
    """The new-user trial (session 31): a CSV cut to its first 10 columns said "control=ideal is not in the data"
    beside ideal's rows, blamed ideal again for the missing exposed-cost figure, and drew an empty raw figure."""
    path = str(tmp_path / "runs.csv")
    pd.DataFrame(sweep_rows()).reindex(columns=COLUMNS[:10]).to_csv(path, index=False)
    assert main([path]) == 0
    out, err = capsys.readouterr()
    assert "(no ratios: control=ideal's rows hold no metric)" in out
    (lacking,) = [line for line in err.splitlines() if "no column" in line]  # 45 lines before
    assert lacking.endswith("no columns duration_s, output_tok_s, total_tok_s, req_s and 42 more (its schema has "
                            "them): read as empty")
    out = tmp_path / "out.png"
    assert main([path, "--plot", str(out)]) == 2 and not out.exists()
    assert capsys.readouterr().err.strip().endswith(f"--plot: the rows hold none of output tok/s, TPOT (ms), decode "
                                                    f"step (ms), control one-way (us); {out} not written")
    from harness.exposed import why_no_exposed_cost

    ok = pd.read_csv(path).reindex(columns=COLUMNS)
    assert why_no_exposed_cost(ok) == "the rows hold no decode step or TPOT"


def test_one_plane_alone_gets_no_ratios(tmp_path, capsys):
    """The main job or a one-plane sweep: nothing to compare, so no column of 1.00x."""
    assert main([write(sweep_rows(planes=("shm",)), tmp_path / "runs.csv")]) == 0
    out = capsys.readouterr().out
    assert "1.00x" not in out and "ratios to" not in out and "(no ratios" not in out


def test_rows_from_a_busy_machine_are_flagged(tmp_path, capsys):
    """The second walkthrough: step +62% 'costs' beside TPOT -18% 'within noise' at a load average of 7 on
    2 cores, and nothing said why. Rows before schema 12 are judged by that load average."""
    rows = [{**r, "schema_version": 11, "cpu_cores": 2, "load_avg_1m": 7.0 if i % 2 else 1.0}
            for i, r in enumerate(sweep_rows())]
    assert main([write(rows, tmp_path / "runs.csv")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"note: {len(rows) // 2} of {len(rows)} rows shared the CPUs with other work (on 2 cores: a 1-min load " \
           "average up to 7.0, above the cores plus the run's ranks): their timings are noisy, and step and TPOT " \
           "verdicts may disagree" in out
    assert main([str(tmp_path / "runs.csv"), "--format", "csv"]) == 0  # on stderr: csv dropped it (a trial)
    assert "shared the CPUs" in " ".join(capsys.readouterr().err.split())
    quiet = [{**r, "load_avg_1m": 1.0} for r in rows]
    assert main([write(quiet, tmp_path / "runs.csv")]) == 0 and "shared the CPUs" not in capsys.readouterr().out
    # a new-user trial: "5 of 5 rows" where one had failed; the tables measure the ok rows alone
    failed = {**rows[1], "status": "failed", "error": "interrupted (SIGINT)", "repeat": 9}
    assert main([write(rows + [failed], tmp_path / "runs.csv")]) == 0
    assert f"note: {len(rows) // 2} of {len(rows)} rows shared the CPUs" in capsys.readouterr().out
    # session 31: 141 of 144 rows of a quiet tp=2 sweep on 2 cores were flagged, at load averages up to 2.7 made of
    # the sweep's own previous jobs; the run's own ranks are allowed for, all of them (simulated nodes share a host)
    own = [{**r, "load_avg_1m": r["tp"] + 1.9, "nodes": 2} for r in rows] + [{**rows[0], "load_avg_1m": 4.2,
                                                                              "workload": "broadcast", "repeat": 7}]
    assert main([write(own, tmp_path / "runs.csv")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "note: 1 of 49 rows shared the CPUs with other work (on 2 cores: a 1-min load average up to 4.2" in out
    assert "their timings are noisy; measure" in out  # a broadcast row: no step or TPOT verdict to disagree


def test_rows_that_shared_the_cpus_are_flagged_by_what_others_took(tmp_path, capsys):
    """Schema 12: the others' cores during the timed run against what the run's own threads leave. The new-user
    trial (session 38): tp=1 with 2 threads beside a test suite (~1 core) ran 10x slower at load averages under 3."""
    rows = [{**r, "cpu_cores": 2, "cpu_threads": 1, "load_avg_1m": 9.0, "cpu_others_cores": 1.1 if i % 3 == 0 else 0.1}
            for i, r in enumerate(sweep_rows())]
    assert main([write(rows, tmp_path / "runs.csv")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"note: {len(rows[::3])} of {len(rows)} rows shared the CPUs with other work (on 2 cores: other processes " \
           "kept up to 1.1 busy, more than the run's own threads left)" in out  # tp=2 or 4 x 1 thread: 1.1 is too many
    bad = [{**r, "cpu_others_cores": "n/a", "cpu_threads": "auto", "load_avg_1m": "?"} for r in rows[:3]]
    assert main([write(rows + bad, tmp_path / "runs.csv")]) == 0  # session 38's check: a bad cell was a TypeError
    assert f"note: {len(rows[::3])} of {len(rows) + 3} rows shared" in " ".join(capsys.readouterr().out.split())
    gpu = [{**r, "device": "cuda", "cpu_cores": 16} for r in rows]  # a GPU rank wants one host thread
    assert main([write(gpu, tmp_path / "runs.csv")]) == 0 and "shared the CPUs" not in capsys.readouterr().out


def test_options_of_the_gate_without_the_gate_are_refused(tmp_path, capsys):
    assert main([write(sweep_rows(), tmp_path / "runs.csv"), "--metrics", "tpot"]) == 2
    assert capsys.readouterr().err.strip() == "error: --metrics applies only to --compare OLD NEW"


def test_the_gate_says_why_it_fails_or_passes(tmp_path, capsys):
    old = write(sweep_rows(), tmp_path / "old.csv")
    new = write(sweep_rows(planes=PLANES[:-1]), tmp_path / "new.csv")  # hybrid's configurations missing
    assert main(["--compare", old, new]) == 1
    assert "the gate fails: 2 configuration(s) missing or failed on a side, listed above (--allow-missing" in \
        capsys.readouterr().out
    assert main(["--compare", old, new, "--allow-missing"]) == 0
    assert capsys.readouterr().out.strip().endswith("the gate passes")


@pytest.mark.parametrize("rows, jobs, not_ok, line", [
    ([], 1, 0, "== sweep (interrupted): 1 job, 0 ok rows =="),
    ([{}], 2, 0, "== sweep (interrupted): 2 jobs, 1 ok row =="),
    # session 56's trial: a job stopped after its first repeat read "1 job, 1 ok row" over its own failed row
    ([{}], 1, 1, "== sweep (interrupted): 1 job, 1 ok row, 1 job not ok =="),
    ([], 3, 2, "== sweep (interrupted): 3 jobs, 0 ok rows, 2 jobs not ok ==")])
def test_the_sweep_line_counts_in_the_singular_and_plural(rows, jobs, not_ok, line, capsys, monkeypatch):
    monkeypatch.setattr("harness.analyze.report", lambda *a, **k: None)  # the line alone, not the tables
    print_sweep_summary(rows, jobs, interrupted=True, not_ok=not_ok)
    assert line in capsys.readouterr().out


@pytest.mark.parametrize("twice", ["same", "thrice", "folder", "copy", "edited copy"])
def test_rows_read_twice_count_once_with_a_note(twice, tmp_path, capsys):
    # a new-user trial: runs.csv named twice gave n=2 ±0% and turned "one repeat" into firm verdicts; a copy with
    # edited values was dropped as a plain copy (session 24)
    rows = [{**r, "run_id": f"r{i}"} for i, r in enumerate(sweep_rows(planes=("ideal", "shm"), tps=(2,), repeats=1))]
    path = write(rows, tmp_path / "runs.csv")
    copied = [{**r, "output_tok_s": r["output_tok_s"] * 10} for r in rows] if twice == "edited copy" else rows
    other = write(copied, tmp_path / "copy.csv") if "copy" in twice else {"same": path, "thrice": path,
                                                                          "folder": str(tmp_path)}[twice]
    assert main([other, path] if twice == "folder" else [path, other] + [path] * (twice == "thrice")) == 0
    out, err = capsys.readouterr()
    assert "one repeat" in out and "costs" not in out and "faster" not in out and "±0%" not in out
    assert ("note: dropped 2 row(s) read twice" in err) == ("copy" in twice)
    assert ("2 row(s) of " in err and "differ from another of their run_id (kept: the first read)" in err) == (
        twice == "edited copy")
    # named three times: one note that says so (session 32 saw "given twice" printed twice)
    times = "3 times" if twice == "thrice" else "2 times"
    assert err.count(f"{path} is given {times} (by name or in a folder): read once") == ("copy" not in twice)


def test_failed_rows_errors_and_missing_metric_columns_are_said_once(tmp_path, capsys):
    # a new-user trial: "0 (+1 failed)" with its error never printed; a deleted column vanished without a word
    rows = sweep_rows(planes=("ideal", "shm"), repeats=2)
    for r in rows[:3]:
        r.update(status="failed", error="RuntimeError: worker 1 exited with -9 " + "x" * 200)
    pd.DataFrame(rows).reindex(columns=[c for c in COLUMNS if c != "tpot_ms_p50"]).to_csv(tmp_path / "a.csv",
                                                                                          index=False)
    assert main([str(tmp_path / "a.csv")]) == 0
    out, err = capsys.readouterr()
    failed = [line for line in err.splitlines() if line.startswith("  3 failed: RuntimeError: worker 1 exited")]
    assert len(failed) == 1 and len(failed[0]) <= 120 and failed[0].endswith("[...]")
    assert err.count("no column tpot_ms_p50 (its schema has one): read as empty") == 1 and "TPOT p50 ms" not in out


def test_a_folder_of_folders_names_the_first_and_counts_the_rest(tmp_path, capsys):
    # a new-user trial: "name one: bcast, ideal1, main, serve" left out serve1 and sweep without a word
    for name in ("a", "b", "c", "d", "e", "f/deeper"):  # a new-user trial: results/h100/session*/ went unnamed
        (tmp_path / name).mkdir(parents=True)
        write(sweep_rows(planes=("shm",), tps=(2,), repeats=1), tmp_path / name / "runs.csv")
    assert main([str(tmp_path)]) == 2
    assert "(its folders are not searched; name one: a, b, c, d and 2 more)" in capsys.readouterr().err


def test_the_step_logs_folder_is_not_offered_as_results(tmp_path, capsys):
    # a new-user trial: "its folders are not read (steps); name one to read it", and naming it failed
    write(sweep_rows(planes=("shm",), tps=(2,), repeats=1), tmp_path / "runs.csv")
    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / "0123456789ab.csv").write_text("step,prefill\n0,1\n")
    assert main([str(tmp_path)]) == 0
    assert "folders" not in capsys.readouterr().err


def test_a_run_that_failed_while_its_engine_started_is_filed_with_its_configuration(tmp_path, capsys):
    # a new-user trial: its row had no launcher, nodes, cpu_threads, all_reduce, gemm (its engine never said
    # them) and sat in a section of its own, "0 (+1 failed)", beside the ok rows of the same configuration
    said = {"launcher": "spawn", "nodes": 1, "cpu_threads": 8, "gemm": "cublas"}
    ok = [{**r, **said} for r in sweep_rows(planes=("ideal", "shm"), tps=(2,), repeats=2)]
    failed = {**ok[-1], "status": "failed", "error": "interrupted (SIGINT)", "repeat": 2, **dict.fromkeys(
        ["launcher", "nodes", "cpu_threads", "all_reduce", "gemm", "output_tok_s", "tpot_ms_p50"])}
    assert main([write(ok + [failed], tmp_path / "runs.csv")]) == 0
    out = capsys.readouterr().out
    assert "| 2 (+1 failed) |" in out and "0 (+1 failed)" not in out, out


def test_compare_files_a_run_that_failed_at_start_with_the_other_files_configuration(tmp_path, capsys):
    """Session 53's new-user trial: NEW held one run stopped while its engine started (no launcher, nodes,
    cpu_threads, all_reduce, gemm); --compare said FAILED, MISSING and NEW only for one plane, 2 configurations."""
    said = {"launcher": "spawn", "nodes": 1, "cpu_threads": 1, "all_reduce": "gloo", "gemm": "torch"}
    ok = [{**r, **said} for r in sweep_rows(planes=("pipe",), tps=(2,), repeats=2)]
    failed = {**ok[0], "status": "failed", "error": "interrupted (SIGINT)", **dict.fromkeys(
        [*said, "output_tok_s", "tpot_ms_p50"])}
    assert main(["--compare", write(ok, tmp_path / "old.csv"), write([failed], tmp_path / "new.csv")]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "MISSING" not in out and "NEW only" not in out, out
    assert "1 configuration(s) missing or failed" in out, out


def test_files_joined_with_cat_are_their_rows_with_one_note_for_the_repeated_header(tmp_path, capsys):
    """Session 27's break test: ``cat a.csv b.csv > both.csv`` read b's header as a row, with ~40 warnings of
    cells that are not numbers. Its header is no row: one note, every row of both files read."""
    a = write(sweep_rows(planes=("ideal",), repeats=2), tmp_path / "a.csv")
    b = write(sweep_rows(planes=("shm",), repeats=2), tmp_path / "b.csv")
    (tmp_path / "both.csv").write_text(open(a).read() + open(b).read())
    assert main([str(tmp_path / "both.csv")]) == 0
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [
        f"note: {tmp_path / 'both.csv'}: ignored 1 repeated header line(s) (files joined with cat?)",
        f"read {tmp_path / 'both.csv'}: 8 row(s), 8 ok, 0 failed"]
    assert "| shm" in out and "| ideal" in out


def test_a_stray_quote_in_a_row_loses_that_line_alone(tmp_path, capsys):
    """Session 29's break test: ``,shm,`` edited to ``,"shm,`` on line 5 of 31: the appender kept the rows after it
    whole, but the analysis read them into one cell and said "3 row(s)"; the new run's row was gone too."""
    path = write(sweep_rows(planes=("ideal", "shm"), repeats=3), tmp_path / "runs.csv")
    lines = open(path).read().splitlines(keepends=True)
    assert ",ideal," in lines[4]
    lines[4] = lines[4].replace(",ideal,", ',"ideal,', 1)
    open(path, "w").write("".join(lines))
    assert main([path]) == 0
    out, err = capsys.readouterr()
    assert f"read {path}: 11 row(s), 11 ok, 0 failed" in err and "damaged line" in err


def test_a_file_named_says_which_diverted_rows_sit_beside_it(tmp_path, capsys):
    """A new user's trial: after a schema change the new rows went to runs.schema11-*.csv, and analysing
    runs.csv by name (as a CI gate does) read the old rows alone without a word."""
    path = write(sweep_rows(planes=("shm",), repeats=1), tmp_path / "runs.csv")
    write(sweep_rows(planes=("ring",), repeats=1), tmp_path / "runs.schema11-47f9d85c.csv")
    assert main([path]) == 0
    err = capsys.readouterr().err
    assert (f"note: {path}: rows diverted from it sit beside it, not read: {tmp_path / 'runs.schema11-47f9d85c.csv'}"
            f" (name them, or the folder: python -m harness.analyze {tmp_path})") in err
    assert main([path, str(tmp_path / "runs.schema11-47f9d85c.csv")]) == 0
    assert "diverted" not in capsys.readouterr().err  # named too: read


def test_a_hand_edit_in_latin1_or_binary_garbage_loses_only_its_bytes(tmp_path, capsys):
    """Session 28's break test: one byte not UTF-8, or NUL garbage appended, skipped the whole file."""
    path = write(sweep_rows(planes=("ideal", "shm"), repeats=2), tmp_path / "runs.csv")
    data = open(path, "rb").read().replace(b"qwen3-0.6b", b"qwen3-0.6b caf\xe9", 1) + b"\x00\xff\xfe junk\n"
    open(path, "wb").write(data)
    assert main([path]) == 0
    out, err = capsys.readouterr()
    assert f"read {path}: 8 row(s), 8 ok, 0 failed" in err
    assert "ignored 1 line(s) of binary data, read 1 byte(s) not UTF-8 as U+FFFD" in err


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_while_drawing_is_one_line_and_leaves_no_cut_figure(sig, tmp_path):
    """The new-user trial (session 32): Ctrl-C during `--plot` printed a KeyboardInterrupt traceback (or, swallowed
    by matplotlib, exited 0), and an SVG being written was left cut off under its final name."""
    from helpers import ROOT

    out = tmp_path / "fig.svg"
    proc = subprocess.Popen([sys.executable, "-m", "harness.analyze", os.path.join(ROOT, "results", "cpu"),
                             "--plot", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    for line in proc.stdout:  # the first figure is written: stop it while it draws the next
        if "written to" in line:
            proc.send_signal(sig)
            break
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig and err.strip().splitlines()[-1] == f"error: interrupted ({sig.name})", err
    assert "Traceback" not in err, err
    for svg in tmp_path.iterdir():  # each figure there whole; no temporary file left
        assert svg.suffix == ".svg" and svg.read_text().rstrip().endswith("</svg>"), svg


def test_a_tp_ladder_shares_its_tables_though_the_engine_set_threads_and_all_reduce_by_tp(tmp_path, capsys):
    """The serve user's trial: tp=1,2 fell into two sections, "cpu_threads=2, all_reduce=none" and "cpu_threads=1,
    all_reduce=gloo", values the engine derives from tp; set by hand within one tp, they still part the rows."""
    rows = [{**r, "cpu_threads": 2 // r["tp"], "all_reduce": "none" if r["tp"] == 1 else "gloo"}
            for r in sweep_rows(planes=("ideal", "shm"), tps=(1, 2), repeats=2)]
    assert main([write(rows, tmp_path / "ladder.csv")]) == 0
    out = capsys.readouterr().out
    assert "-- " not in out and "cpu_threads" not in out, out
    rows += [{**r, "cpu_threads": 2, "repeat": r["repeat"] + 2} for r in rows if r["tp"] == 2]
    assert main([write(rows, tmp_path / "by_hand.csv")]) == 0
    assert "cpu_threads=2" in capsys.readouterr().out


def test_a_run_that_failed_at_start_is_filed_with_its_configuration_s_failed_runs(tmp_path, capsys):
    """Session 38's new-user trial: a file of failed rows only split one configuration in two, since a run stopped
    while its engine started has no launcher, cpu_threads, all_reduce or gemm: filed with rows that have them."""
    row = {**sweep_rows(planes=("shm",), tps=(2,), repeats=1)[0], "status": "failed", "error": "interrupted (SIGINT)"}
    said = {"launcher": "spawn", "nodes": 1, "cpu_threads": 1, "all_reduce": "gloo", "gemm": "torch"}
    rows = [{**row, **said, "repeat": 0}, {**row, **dict.fromkeys(said), "repeat": 1},
            {**row, **dict.fromkeys(said), "repeat": 2}]
    main([write(rows, tmp_path / "runs.csv")])  # "error: no ok row: every run failed"
    out = capsys.readouterr().out
    assert "0 (+3 failed)" in out and "(+1 failed)" not in out and "(+2 failed)" not in out, out


def test_tp_1_rows_get_no_ratios_their_planes_send_nothing(tmp_path, capsys):
    """The new-user trial (session 56): a tp=1 sweep of ideal and shm printed shm at 0.49x of ideal's tok/s, the
    spread of two runs of the same engine (at tp=1 no plane sends)."""
    path = write(sweep_rows(tps=(1,)), tmp_path / "runs.csv")
    assert main([path]) == 0
    out = capsys.readouterr().out
    assert "(no ratios at tp=1: no plane sends there, so the planes differ only by run-to-run noise)" in out
    assert "1.00x" not in out and "ratios to" not in out
    assert main([write(sweep_rows(tps=(1, 2)), tmp_path / "mixed.csv"), "--format", "csv"]) == 0
    df = pd.read_csv(io.StringIO(capsys.readouterr().out))
    summary = df[df.table == "summary"]
    assert summary.loc[summary.tp == 1, "tpot_ms_p50_vs_ideal"].isna().all()
    assert summary.loc[summary.tp == 2, "tpot_ms_p50_vs_ideal"].notna().all()
    assert main([str(tmp_path / "mixed.csv")]) == 0
    assert "ratios to control=ideal at the same configuration, none at tp=1 (no plane sends there)" in \
        " ".join(capsys.readouterr().out.split())
    failed = [{**r, "status": "failed"} if r["control"] == "ideal" and r["tp"] == 2 else r
              for r in sweep_rows(tps=(1, 2))]  # the trial's case: tp=2's ideal failed, tp=1 has ideal beside others
    assert main([write(failed, tmp_path / "failed.csv")]) == 0
    assert "(no ratios: every control=ideal row failed; none at tp=1 either, where no plane sends)" in \
        capsys.readouterr().out
