"""Results are never corrupted: whole rows under a lock, header once, a different header never rewritten."""

from __future__ import annotations

import multiprocessing as mp

import pandas as pd
import pytest

from harness.results_csv import append_row, write_run_json

COLUMNS = ["a", "b", "text"]


def _writer(path: str, worker: int, rows: int) -> None:
    for i in range(rows):
        append_row(path, COLUMNS, {"a": worker, "b": i, "text": "x, \"quoted\"\nline" * 50}, schema_version=1)


@pytest.mark.slow
def test_parallel_appends_give_whole_rows(tmp_path):
    path = str(tmp_path / "runs.csv")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 25)) for w in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    df = pd.read_csv(path)
    assert len(df) == 150 and list(df.columns) == COLUMNS
    assert sorted(df.groupby("a").b.apply(sorted).sum()) == sorted(list(range(25)) * 6)


def test_different_header_goes_to_a_new_file(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text("old,header\n1,2\n")
    written = append_row(str(path), COLUMNS, {"a": 1}, schema_version=7)
    assert written != str(path) and ".schema7-" in written
    assert path.read_text() == "old,header\n1,2\n"
    assert len(pd.read_csv(written)) == 1


@pytest.mark.parametrize("partial", ["3,4,trunc", '3,4,"hel', '3,4,"two\nli', '3,4,"say ""hi""\n'])
def test_a_partial_last_row_is_set_aside_and_swallows_no_later_row(tmp_path, capsys, partial):
    # a break test: a row cut inside a quoted cell ('"hel') swallowed every row appended after it
    path = tmp_path / "runs.csv"
    path.write_text("a,b,text\n1,2,ok\n" + partial)  # a writer died mid-row
    for i in (5, 7):
        append_row(str(path), COLUMNS, {"a": i, "b": i + 1, "text": "whole, \"quoted\""}, schema_version=1)
    df = pd.read_csv(path)
    assert df.a.tolist() == [1, 5, 7] and df.text.tolist()[1:] == ['whole, "quoted"'] * 2
    assert (tmp_path / "runs.csv.partial").read_text() == partial + "\n"
    assert capsys.readouterr().err.count("its last row was cut short") == 1


@pytest.mark.parametrize("edited", ['1,2,pi"pe', '1,2,shm 5"', '1,2,"open', '1,2,"a"b'])
def test_a_stray_quote_in_a_middle_row_moves_no_whole_row(tmp_path, capsys, edited):
    """Session 28's break test: one '"' typed into a middle row made the next run move every row after it (whole
    ones, each ending in a newline) to runs.csv.partial. Only a cut last row is set aside."""
    path = tmp_path / "runs.csv"
    before = f"a,b,text\n{edited}\n3,4,ok\n5,6,ok\n"
    path.write_text(before)
    append_row(str(path), COLUMNS, {"a": 7, "b": 8, "text": "new"}, schema_version=1)
    assert path.read_text() == before + "7,8,new\n" and not (tmp_path / "runs.csv.partial").exists()
    assert "cut short" not in capsys.readouterr().err


def test_a_byte_that_is_not_utf8_further_down_stops_no_row(tmp_path):
    """Session 28's break test: one Latin-1 byte in a middle row ('caf\\xe9') made every later run end in a
    UnicodeDecodeError traceback with its row written nowhere."""
    path = tmp_path / "runs.csv"
    path.write_bytes(b"a,b,text\n1,2,caf\xe9\n")
    assert append_row(str(path), COLUMNS, {"a": 3, "b": 4, "text": "ok"}, schema_version=1) == str(path)
    assert path.read_bytes() == b"a,b,text\n1,2,caf\xe9\n3,4,ok\n"


def test_a_held_lock_is_waited_for_out_loud_then_the_row_is_written(tmp_path, capsys, monkeypatch):
    """Session-7 break test: while another process held the results lock the run waited 60 s in silence."""
    import threading

    from filelock import FileLock

    import harness.results_csv as rc

    path = str(tmp_path / "runs.csv")
    holder = FileLock(path + ".lock", thread_local=False)  # released by the timer thread
    holder.acquire()
    threading.Timer(1.5, holder.release).start()
    assert rc.append_row(path, ["a", "b"], {"a": 1, "b": 2}, 1) == path
    assert "waiting for" in capsys.readouterr().err and open(path).read() == "a,b\n1,2\n"


def test_a_row_after_its_runs_ok_row_gets_an_id_of_its_own(tmp_path):
    """A stop just after a run's ok row is written adds a failed row: it must not share (and overwrite) the ok
    row's run_id and run file."""
    from harness.results_csv import Results

    results = Results(str(tmp_path / "runs.csv"), ["run_id", "status", "time_utc"], 1, config={})
    results.add({"run_id": "abc", "status": "ok"})
    results.add({"run_id": "abc", "status": "failed"})
    df = pd.read_csv(tmp_path / "runs.csv")
    assert df.status.tolist() == ["ok", "failed"] and df.run_id[0] == "abc" and df.run_id[1] != "abc"
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(f"{i}.json" for i in df.run_id)


def test_the_run_file_holds_every_csv_column(tmp_path):
    """A new user's trial: the run JSON's row lacked the CSV's empty columns (payload, payload_bytes)."""
    import json

    from harness.results_csv import Results

    results = Results(str(tmp_path / "runs.csv"), ["run_id", "status", "payload", "time_utc"], 1, config={})
    results.add({"run_id": "abc", "status": "ok"})
    row = json.loads((tmp_path / "runs" / "abc.json").read_text())["row"]
    assert list(row) == ["run_id", "status", "payload", "time_utc"] and row["payload"] is None


def test_the_run_file_is_strict_json_with_infinities_nested_in_the_config(tmp_path):
    """Reported: request_rate=inf in the config was written as a bare Infinity, which JSON readers refuse."""
    import json

    row = {"run_id": "abc123", "request_rate": float("inf"), "tpot_ms_p50": float("nan"), "output_tok_s": 1.5}
    config = {"workload": {"request_rate": float("inf"), "rates": [1.0, float("-inf")]}, "tp": 2}
    path, why = write_run_json(str(tmp_path), row, config)
    text = open(path).read()
    assert why is None and "Infinity" not in text and "NaN" not in text
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert data["config"]["workload"] == {"request_rate": "inf", "rates": [1.0, "-inf"]}
    assert data["row"]["tpot_ms_p50"] is None and data["row"]["output_tok_s"] == 1.5


def test_a_serve_run_file_has_the_keys_vllm_always_writes(tmp_path):
    """Reported (session 34's trial): without an SLO ``request_goodput`` was left out and ``failed`` never written,
    where ``vllm bench serve --save-result`` writes both (null goodput without --goodput). Session 35's audit: an ok
    run without a 2-token request had no TPOT or ITL keys, which vLLM writes (0.0; null here)."""
    import json

    for status, failed in (("ok", 0), ("stalled", None)):
        row = {"run_id": f"r{status}", "status": status, "request_rate": 4.0, "max_concurrency": None,
               "goodput_req_s": None, "req_s": 3.5}
        vllm = json.loads(open(write_run_json(str(tmp_path), row, {})[0]).read())["vllm"]
        latencies = {f"{s}_{m}_ms": None for m in ("ttft", "tpot", "itl", "e2el")
                     for s in ("mean", "median", "std", "p90", "p99")} if status == "ok" else {}
        assert vllm == {"request_throughput": 3.5, "request_goodput": None, "request_rate": 4.0,
                        "max_concurrency": None, "failed": failed, **latencies}
    bench = json.loads(open(write_run_json(str(tmp_path), {"run_id": "b", "status": "ok", "req_s": 3.5}, {})[0]).read())
    assert bench["vllm"] == {"request_throughput": 3.5}  # not a serve run: vLLM's serve keys stay out


def test_a_stop_while_waiting_for_the_lock_keeps_the_row_and_waits_no_more(tmp_path, monkeypatch):
    """Session 29's break test: Ctrl-C while another process held runs.csv.lock lost the finished run's ok row
    (only its failed row reached a fallback file) and took 61 s: the failed row waited for the lock again."""
    import time

    from filelock import FileLock

    from harness import results_csv, signals
    from harness.schema import COLUMNS, SCHEMA_VERSION

    path = str(tmp_path / "runs.csv")
    results = results_csv.Results(path, COLUMNS, SCHEMA_VERSION)

    def interrupted(*args):
        raise KeyboardInterrupt("SIGINT")

    monkeypatch.setattr(results_csv, "append_row", interrupted)
    with pytest.raises(KeyboardInterrupt):
        results.add({"run_id": "0123456789ab", "status": "ok", "output_tok_s": 99.5})
    (kept,) = tmp_path.glob("runs.unwritten-*.csv")
    assert pd.read_csv(kept).output_tok_s.tolist() == [99.5] and "interrupted while waiting" in results.problem
    monkeypatch.undo()
    monkeypatch.setattr(signals, "_RECEIVED", ["SIGINT"])  # the stop under way: its failed row waits 1 s, not 60
    with FileLock(path + ".lock"):
        start = time.monotonic()
        written = results.add({"run_id": "0123456789ab", "status": "failed", "error": "interrupted (SIGINT)"})
        assert time.monotonic() - start < 5 and "unwritten" in written


def test_a_file_saved_by_a_spreadsheet_keeps_its_rows_and_takes_new_ones(tmp_path):
    """Session 29's break test: a UTF-8 BOM or CRLF line ends (a spreadsheet's save) sent the next row to
    ``runs.schema11-*.csv`` as "another schema's header", and the analysis refused the file (no schema_version)."""
    from harness.analyze import main
    from harness.schema import COLUMNS, SCHEMA_VERSION

    path = tmp_path / "runs.csv"
    append_row(str(path), COLUMNS, {"run_id": "a", "status": "ok", "control": "shm", "tp": 2}, SCHEMA_VERSION)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes().replace(b"\n", b"\r\n"))
    row = {"run_id": "b", "status": "ok", "control": "shm", "tp": 2}
    assert append_row(str(path), COLUMNS, row, SCHEMA_VERSION) == str(path)
    assert main([str(path)]) == 0 and list(tmp_path.glob("*.csv")) == [path]


def test_ids_and_versions_stay_text(tmp_path, monkeypatch):
    """Session 35's CI failure: run_id "122e20195055" read back as inf, and its requests file was "not found". A new
    id is never one that reads as a number; an old one, a commit "0123456" or a cuda_version "12.10" read as text."""
    import uuid

    from harness.load_results import load
    from harness.results_csv import new_run_id
    from harness.schema import COLUMNS, SCHEMA_VERSION

    draws = iter(["122e20195055" + "0" * 20, "0123456789ab" + "0" * 20])
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(next(draws)))
    assert new_run_id() == "0123456789ab"
    row = {"run_id": "122e20195055", "status": "ok", "control": "shm", "tp": 2, "git_commit": "0123456",
           "cuda_version": "12.10", "tag": "7"}
    append_row(str(tmp_path / "runs.csv"), COLUMNS, row, SCHEMA_VERSION)
    got = load([str(tmp_path / "runs.csv")]).iloc[0]
    keys = ("run_id", "git_commit", "cuda_version", "tag")
    assert [got[k] for k in keys] == ["122e20195055", "0123456", "12.10", "7"]
