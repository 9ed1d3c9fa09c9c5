"""Failures that say their cause and damage nothing (issue 28): a full disk under the results file, a file
given as results_dir, a Python API script without the main guard, a SIGKILLed rank 0 and the resource
tracker, more ranks x threads than cores; an engine that fails to start, or is shut down, in a process that
starts another."""

from __future__ import annotations

import csv
import errno
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from helpers import ROOT, children, exited, harness, orphaned_workers, wait_until
from omegaconf import OmegaConf

from harness.job_setup import warn_shared_cores
from harness.results_csv import Results

COLUMNS = ["schema_version", "time_utc", "run_id", "status", "x", "note"]


class FullDisk:
    """``os.write`` and ``os.fsync`` as on a disk that has ``room[d]`` bytes left under each directory ``d``:
    a write takes what fits and the next one fails with ENOSPC (as the kernel does); with ``fsync_error``,
    fsync fails there (EIO: what a full NFS or thin-provisioned volume reports late). Elsewhere: the real ones."""

    def __init__(self, monkeypatch, room: dict, fsync_error: bool = False):
        self.room = {os.path.realpath(d): n for d, n in room.items()}
        self.fsync_error = fsync_error
        self.real_write, self.real_fsync = os.write, os.fsync
        monkeypatch.setattr(os, "write", self.write)
        monkeypatch.setattr(os, "fsync", self.fsync)

    def _directory(self, fd: int) -> str | None:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
        return next((d for d in self.room if target.startswith(d + os.sep)), None)

    def write(self, fd, data):
        d = self._directory(fd)
        if d is None:
            return self.real_write(fd, data)
        n = min(len(data), self.room[d])
        if n == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room[d] -= n
        return self.real_write(fd, bytes(data[:n]))

    def fsync(self, fd):
        if self.fsync_error and self._directory(fd) is not None:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return self.real_fsync(fd)


def results_with_rows(directory, n: int = 1) -> tuple[Results, bytes]:
    """A results file in ``directory`` holding ``n`` rows; (its Results, its bytes)."""
    directory.mkdir(exist_ok=True)
    results = Results(str(directory / "runs.csv"), COLUMNS, 1)
    for i in range(n):
        results.add({"status": "ok", "x": i, "note": "z" * 100})
    return results, (directory / "runs.csv").read_bytes()


def files(directory) -> list[str]:
    """What a failed write could leave: every file but the lock."""
    return sorted(p.name for p in directory.iterdir() if not p.name.endswith(".lock"))


def temp_dir(tmp_path, monkeypatch):
    """``tmp_path/tmp`` made the system's temp directory (the last fallback); the working directory becomes
    ``tmp_path/cwd``, which a failure must leave empty (the trial: a fallback there showed in ``git status``)."""
    for name in ("tmp", "cwd"):
        (tmp_path / name).mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path / "tmp"


@pytest.mark.parametrize("room, fsync_error", [(40, False), (1 << 20, True)], ids=["enospc-mid-write", "eio-at-fsync"])
def test_a_full_disk_leaves_the_results_file_as_it_was(tmp_path, monkeypatch, capsys, room, fsync_error):
    """The append fails part way (or at fsync): runs.csv is byte for byte as before, the fallback beside it
    (the same full disk) leaves no stub, the row goes to the temp directory, and ``problem`` says why."""
    results, before = results_with_rows(tmp_path / "results")
    elsewhere = temp_dir(tmp_path, monkeypatch)
    capsys.readouterr()
    FullDisk(monkeypatch, {tmp_path / "results": room}, fsync_error=fsync_error)
    went = results.add({"run_id": "r2", "status": "ok", "x": 2, "note": "y" * 200})
    assert (tmp_path / "results" / "runs.csv").read_bytes() == before
    assert files(tmp_path / "results") == ["runs.csv"]
    assert went == str(elsewhere / "runs.unwritten-r2.csv")
    rows = list(csv.DictReader(open(went, newline="")))
    assert [(r["run_id"], r["x"], r["note"]) for r in rows] == [("r2", "2", "y" * 200)]
    why = "Input/output error" if fsync_error else "No space left on device"
    assert results.problem and why in results.problem and went in results.problem
    assert capsys.readouterr().err == f"error: {results.problem}\n"


def test_a_full_disk_everywhere_prints_the_row_and_leaves_no_stub(tmp_path, monkeypatch, capsys):
    """Every place is full, the temp directory with room for part of the fallback: no partial stub
    anywhere, the results file unchanged, the row printed after the one error line."""
    results, before = results_with_rows(tmp_path / "results")
    elsewhere = temp_dir(tmp_path, monkeypatch)
    capsys.readouterr()
    FullDisk(monkeypatch, {tmp_path / "results": 0, elsewhere: 30})
    assert results.add({"schema_version": 1, "run_id": "r3", "status": "ok", "x": 3}) == "stderr"
    assert (tmp_path / "results" / "runs.csv").read_bytes() == before
    assert files(tmp_path / "results") == ["runs.csv"] and files(elsewhere) == []
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"error: {results.problem}" and "nor to a fallback file" in results.problem
    assert err[1] == ",".join(COLUMNS) and err[2].startswith("1,") and ",r3,ok,3," in err[2]


def test_a_new_results_file_that_cannot_be_written_is_not_left_empty(tmp_path, monkeypatch):
    """No results file yet and no room: none is left behind (not an empty or header-only one)."""
    (tmp_path / "results").mkdir()
    elsewhere = temp_dir(tmp_path, monkeypatch)
    FullDisk(monkeypatch, {tmp_path / "results": 10})
    results = Results(str(tmp_path / "results" / "runs.csv"), COLUMNS, 1)
    assert results.add({"run_id": "r4", "status": "ok"}) == str(elsewhere / "runs.unwritten-r4.csv")
    assert files(tmp_path / "results") == []


def test_a_full_disk_says_so_in_one_line_and_leaves_no_run_file_stub(tmp_path, monkeypatch, capsys):
    """The new-user trial (session 22), results_dir on a full tmpfs: two stderr lines (the run file's, the
    row's), the fallback in the working directory, an empty runs/<id>.json.tmp left. One line now, naming
    both; the row in the temp directory; nothing under the results directory but what was there."""
    results, before = results_with_rows(tmp_path / "results")
    results.config = {"k": 1}  # a harness job's Results: each row also writes runs/<run_id>.json
    elsewhere = temp_dir(tmp_path, monkeypatch)
    capsys.readouterr()
    FullDisk(monkeypatch, {tmp_path / "results": 0})
    assert results.add({"run_id": "r6", "status": "ok", "x": 6}) == str(elsewhere / "runs.unwritten-r6.csv")
    assert (tmp_path / "results" / "runs.csv").read_bytes() == before and results.run_file is None
    assert files(tmp_path / "results") == ["runs.csv"] and files(tmp_path / "cwd") == []  # no runs/ nor .tmp
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"error: {results.problem}" and "the row went to " + str(elsewhere) in line
    assert f"cannot write {tmp_path / 'results' / 'runs' / 'r6.json'}: No space left on device" in line


def test_a_run_file_that_cannot_be_written_says_so_in_one_line(tmp_path, capsys):
    """The row lands, its run file cannot (``runs`` is a file here): one line, exit 1's ``problem``."""
    results, _ = results_with_rows(tmp_path)
    results.config = {"k": 1}
    (tmp_path / "runs").write_text("")
    capsys.readouterr()
    assert results.add({"run_id": "r7", "status": "ok"}) == str(tmp_path / "runs.csv") and results.run_file is None
    assert capsys.readouterr().err == f"error: cannot write {tmp_path / 'runs' / 'r7.json'}: File exists\n"
    assert results.problem == "the run file of row r7 could not be written"


@pytest.mark.slow
def test_a_file_size_limit_cuts_the_partial_row_back(tmp_path):
    """A real partial write, by the kernel: RLIMIT_FSIZE 20 bytes above the file's size (writes past it
    fail with EFBIG after taking what fits). The file keeps its bytes; the row goes to the fallback."""
    _, before = results_with_rows(tmp_path, n=5)
    code = (
        "import resource, signal\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({len(before) + 20}, resource.RLIM_INFINITY))\n"
        "from harness.results_csv import Results\n"
        f"r = Results({str(tmp_path / 'runs.csv')!r}, {COLUMNS!r}, 1)\n"
        "print(r.add({'run_id': 'r5', 'status': 'ok', 'x': 5, 'note': 'y' * 200}))\n")
    res = subprocess.run([sys.executable, "-B", "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (tmp_path / "runs.csv").read_bytes() == before
    assert res.stdout.strip() == str(tmp_path / "runs.unwritten-r5.csv") and "File too large" in res.stderr
    assert [r["run_id"] for r in csv.DictReader(open(res.stdout.strip(), newline=""))] == ["r5"]


@pytest.mark.slow
@pytest.mark.parametrize("below", ["", "sub/dir"], ids=["the-file", "under-the-file"])
def test_results_dir_that_is_a_file_says_so(tmp_path, model_cache, below):
    """results_dir=<a file> (or a directory under one): one line naming the file, exit 2, before any run
    (it said only "File exists" / "Not a directory")."""
    blocking = tmp_path / "x"
    blocking.write_text("not a directory\n")
    given = os.path.join(str(blocking), below) if below else str(blocking)
    res = harness(f"results_dir={given}", "workload=smoke", "progress=false", cache=model_cache, timeout=120)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: results_dir={given} "), res.stderr
    assert lines[0].endswith(f"{blocking} is a file, not a directory")
    assert blocking.read_text() == "not a directory\n"


@pytest.mark.slow
@pytest.mark.parametrize("folder, argv", [("runs", ["workload=smoke"]),
                                          ("requests", ["workload=serve", "save_requests=true",
                                                        "workload.num_prompts=3"])])
def test_a_file_in_the_way_of_a_run_folder_is_refused_before_the_run(tmp_path, model_cache, folder, argv):
    """A new-user trial: a plain file ``runs`` (or ``requests``) in results_dir passed the checks, and the
    run failed after it had measured (exit 1; the requests' a failed row)."""
    (tmp_path / folder).write_text("not a directory\n")
    res = harness(*argv, f"results_dir={tmp_path}", "progress=false", cache=model_cache, timeout=120)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot write the "), res.stderr
    assert f"to {tmp_path / folder}: it is not a directory" in lines[0]
    assert sorted(os.listdir(tmp_path)) == [folder]  # no row, no other file


@pytest.mark.parametrize("folder, argv", [
    ("runs", ["workload=smoke"]), ("runs", ["workload=broadcast", "tp=2"]),
    ("requests", ["workload=serve", "save_requests=true"]), ("steps", ["workload=smoke", "step_log=true"]),
    ("traces", ["workload=smoke", "profile=torch"])])
def test_every_folder_a_job_writes_is_checked_for_every_job_of_a_sweep(tmp_path, folder, argv):
    from harness.preflight import check_command

    good, blocked = tmp_path / "good", tmp_path / "blocked"
    blocked.mkdir()
    (blocked / folder).write_text("")
    problem, _ = check_command(["-m", *argv, f"results_dir={good},{blocked}"])  # the second job's
    assert problem is not None and problem.startswith("cannot write the "), problem
    assert problem.endswith(f"to {blocked / folder}: it is not a directory (move it, or pick another results_dir)")
    assert os.listdir(tmp_path) == ["blocked"]


@pytest.mark.parametrize("folder, argv", [
    ("requests", ["workload=smoke", "save_requests=true"]), ("steps", ["engine=hf", "step_log=true"]),
    ("traces", ["workload=broadcast", "tp=2", "profile=torch"])])
def test_a_folder_the_job_does_not_write_is_not_checked(tmp_path, folder, argv):
    from harness.preflight import check_command

    (tmp_path / folder).write_text("")
    assert check_command([*argv, f"results_dir={tmp_path}"])[0] is None


def test_a_run_folder_that_cannot_be_written_is_refused(tmp_path, monkeypatch):
    from harness import conf_paths
    from harness.preflight import check_command

    (tmp_path / "steps").mkdir()
    real = conf_paths.cannot_write
    monkeypatch.setattr(conf_paths, "cannot_write",
                        lambda d: "Permission denied" if d.endswith("steps") else real(d))  # root writes anywhere
    problem, _ = check_command(["workload=smoke", "step_log=true", f"results_dir={tmp_path}"])
    assert problem == f"cannot write the step logs (step_log=true) to {tmp_path / 'steps'}: Permission denied"


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_a_script_without_the_main_guard_is_named_in_the_last_line(tmp_path, tiny_untied):
    """The README's Python API without ``if __name__ == "__main__":``: the spawned worker re-runs the script
    (multiprocessing's spawn). The error's last line says so (it said "process exited with code 1 (node
    ?)", 71 lines after multiprocessing's own hint), and no worker is left."""
    script = tmp_path / "no_guard.py"
    script.write_text("from engine import LLM\n\n"
                      f"llm = LLM({tiny_untied!r}, tensor_parallel_size=2, device='cpu')\nllm.shutdown()\n")
    before = orphaned_workers()
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1"}
    res = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 1, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert "rank 1" in last and 'no `if __name__ == "__main__":` guard' in last and "Python API" in last, last
    assert "bootstrapping phase" not in res.stderr and len(res.stderr.splitlines()) < 30, res.stderr
    wait_until(lambda: not orphaned_workers() - before, 10, "no worker left behind")


def segments_of(pid: int) -> list[str]:
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"tpcp_{pid}_")]


def listed_semaphores(pid: int) -> list[str]:
    """The semaphore files that rank ``pid``'s registries list (``backends/segments.register_semaphores``)."""
    out = []
    for name in segments_of(pid):
        if name.split("_")[2].startswith("sems"):
            with open(f"/dev/shm/{name}", "rb") as f:
                out += ["sem." + s.lstrip("/") for s in f.read().rstrip(b"\0").decode().split()]
    return out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_sigkilled_rank0_leaves_no_resource_tracker_warning(tmp_path, model_cache):
    """kill -9 of rank 0: its workers remove its segments and semaphores as they leave, and multiprocessing's
    resource tracker (which outlives rank 0 on the same stderr) has nothing to call leaked (it printed "There
    appear to be 2 leaked shared_memory objects", and as many semaphores)."""
    env = {**os.environ, "TPCP_CACHE": model_cache}
    proc = subprocess.Popen([sys.executable, "-m", "harness", "tp=2", "workload=bench", "repeat=50", "progress=false",
                             f"results_dir={tmp_path}"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)

    def workers() -> list[int]:
        def spawned(pid: int) -> bool:
            try:
                with open(f"/proc/{pid}/cmdline") as f:
                    return "spawn_main" in f.read()
            except OSError:  # a short-lived child, gone
                return False
        return [c for c in children(proc.pid) if spawned(c)]

    try:
        wait_until(lambda: workers() and len(segments_of(proc.pid)) >= 2, 180, "the workers and the segments")
        time.sleep(3)  # into the timed run
        spawned, semaphores = workers(), listed_semaphores(proc.pid)
        assert semaphores
    finally:
        proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=90)  # EOF once every holder of its stderr, the tracker too, is gone
    assert proc.returncode == -signal.SIGKILL
    wait_until(lambda: all(exited(w) for w in spawned), 10, "the workers to exit")
    assert "resource_tracker" not in err and "leaked" not in err, err[-3000:]
    wait_until(lambda: not segments_of(proc.pid), 10, "rank 0's segments to be removed")
    assert not [s for s in semaphores if os.path.exists(f"/dev/shm/{s}")]


@pytest.fixture
def two_cores(monkeypatch):
    """A host whose process may run on 2 cores, not under torchrun."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)


def job(**keys):
    return OmegaConf.create({"tp": 1, "cpu_threads": None, "engine": "tp", **keys})


def test_more_rank_threads_than_cores_is_one_warning(two_cores, capsys):
    """tp=4 on 2 cores (1 thread per rank): one ``warning:`` line on stderr naming the ranks, the threads,
    the cores and the contention; cpu_threads=2 at tp=2 too."""
    line = warn_shared_cores(job(tp=4), "cpu")
    assert capsys.readouterr().err == line + "\n"
    assert line.startswith("warning: tp=4: 4 rank(s)") and "1 torch thread(s)" in line
    assert "the 2 core(s)" in line and "contention" in line and "\n" not in line
    assert "= 4 threads" in warn_shared_cores(job(tp=2, cpu_threads=2), "cpu")


def test_rank_threads_within_the_cores_say_nothing(two_cores, monkeypatch, capsys):
    """tp=2 or tp=1 with the default threads (cores / tp), CUDA, engine=hf, and torchrun's ranks spread over
    two hosts (2 of 4 here): nothing."""
    assert warn_shared_cores(job(tp=2), "cpu") is None and warn_shared_cores(job(tp=1), "cpu") is None
    assert warn_shared_cores(job(tp=4), "cuda") is None and warn_shared_cores(job(tp=4, engine="hf"), "cpu") is None
    torchrun = {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    for var, value in torchrun.items():
        monkeypatch.setenv(var, value)
    assert warn_shared_cores(job(tp=4), "cpu") is None
    assert capsys.readouterr().err == ""


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_harness_warns_before_a_run_on_too_few_cores(tmp_path, model_cache):
    """The harness on one core with 2 torch threads: the warning comes once, and the run goes on."""
    env = {**os.environ, "TPCP_CACHE": model_cache}
    core = min(os.sched_getaffinity(0))
    res = subprocess.run([sys.executable, "-m", "harness", "tp=1", "cpu_threads=2", "device=cpu", "workload=smoke",
                          "progress=false", f"results_dir={tmp_path}"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=200, preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    assert res.returncode == 0, res.stderr[-2000:]
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "the 1 core(s)" in warnings[0] and "contention" in warnings[0], res.stderr


def test_a_start_that_fails_after_the_process_group_formed_leaves_room_for_the_next(tiny_untied, monkeypatch):
    """An engine whose rank 0 fails after joining the data-plane process group (here: reading the weights; on
    the H200, out of memory in its warm-up, call 63) leaves the process able to start the next one. The group
    stayed formed, so every later job of that sweep was refused ("this process already runs an engine")."""
    import torch.distributed as dist

    import engine.model_runner
    from engine import LLM, SamplingParams

    def unreadable(*_):
        raise OSError("weights unreadable")

    monkeypatch.setattr(engine.model_runner, "load_weights", unreadable)
    with pytest.raises(OSError, match="weights unreadable"):
        LLM(tiny_untied, device="cpu")
    assert not dist.is_initialized()
    monkeypatch.undo()
    with LLM(tiny_untied, device="cpu") as llm:
        out = llm.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))
    assert len(out[0]["token_ids"]) == 2


def test_a_shut_down_engine_frees_its_weights_and_kv_cache_while_it_is_still_referenced(tiny_untied):
    """The example: a sweep's next engine (another ``llm.*`` setting) ran out of GPU memory in its warm-up, as
    the engine before, shut down but still referenced, held its ~125 GB KV cache (call 63)."""
    import weakref

    from engine import LLM, SamplingParams

    llm = LLM(tiny_untied, device="cpu")
    model = llm.runner.model
    held = [weakref.ref(t) for t in (model.attention_layers()[0].k_cache, model.lm_head.weight)]
    del model
    llm.shutdown()
    assert [r() for r in held] == [None, None]
    # session 52's trial: step() after shutdown returned [] where generate() and add_request() raise
    for call in (llm.step, lambda: llm.generate([[1, 2]], SamplingParams(max_tokens=1)),
                 lambda: llm.add_request([1, 2], SamplingParams(max_tokens=1))):
        with pytest.raises(RuntimeError, match="shut down"):
            call()


@pytest.mark.slow
def test_a_worker_that_dies_during_a_start_up_collective_is_named(tiny_untied, monkeypatch):
    """A worker killed while rank 0 is in a start-up collective (the KV blocks' all_reduce): the error names it,
    as one mid-run does. CI caught gloo's bare "Read error" from a worker killed at that moment."""
    import multiprocessing

    import engine.model_runner
    from engine import LLM, WorkerError

    sized = engine.model_runner.ModelRunner._local_num_blocks

    def kill_the_workers_first(runner):
        for worker in multiprocessing.active_children():
            worker.kill()
            worker.join(10)
        return sized(runner)

    monkeypatch.setattr(engine.model_runner.ModelRunner, "_local_num_blocks", kill_the_workers_first)
    with pytest.raises(WorkerError, match="rank 1") as err:
        LLM(tiny_untied, tensor_parallel_size=2, device="cpu")
    assert err.value.__suppress_context__  # one traceback (session 34's trial: rank 0's, then the same again)
