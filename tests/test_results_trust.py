"""Results one can trust: per-run counters and stamps, the right GPUs, rows never lost, bounded start-up,
nothing left behind by a killed run, one-line errors for bad overrides."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pandas as pd
import pytest
from helpers import ROOT, children, harness

from harness.metrics import NvmlSampler, match_handles


class FakeNvml:
    """NVML with GPUs at PCI buses 0x1a, 0x1b, 0x3c, 0x3d (in NVML's own order)."""

    def __init__(self, buses=(0x1A, 0x1B, 0x3C, 0x3D)):
        self.buses = buses

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.buses)

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"gpu{i}"

    def nvmlDeviceGetPciInfo(self, handle):
        return SimpleNamespace(domain=0, bus=self.buses[int(handle[3:])], device=0)

    def nvmlDeviceGetName(self, handle):
        return b"Fake H200"


def test_nvml_handles_follow_the_cuda_devices_not_their_indices():
    """CUDA_VISIBLE_DEVICES=2,3: cuda:0 and cuda:1 are NVML's GPUs 2 and 3, found by PCI address."""
    visible = {0: (0, 0x3C, 0), 1: (0, 0x3D, 0)}
    handles, how = match_handles([0, 1], FakeNvml(), address=visible.__getitem__)
    assert handles == ["gpu2", "gpu3"] and how == "pci"


def test_a_device_without_an_nvml_handle_is_named_and_not_sampled():
    handles, how = match_handles([0], FakeNvml(), address=lambda i: (0, 0x99, 0))
    assert handles == [] and "cuda:0" in how and "not sampled" in how
    sampler = NvmlSampler([], nvml=FakeNvml())  # no CUDA device: inert
    assert not sampler.available and sampler.summary()["gpu_util_pct_mean"] is None


def test_the_model_hash_names_the_model_not_the_transformers_release_that_wrote_it(tmp_path, tiny_untied):
    """CI's gate matches rows on model_hash, and torchrun's ranks compare the model at start-up. One preset written
    by transformers 5.24.0 and 5.25.0 hashed apart (the writer's version), then by 4.57.1 and 5.25.0 (a new user's
    trial: 4.x writes rope_theta and rope_scaling where 5.x writes rope_parameters, and no null ids): the gate
    compared nothing. Both hash what the engine reads of the configs, and a changed value still tells them apart."""
    import json
    import shutil

    from omegaconf import OmegaConf

    from engine.config import EngineConfig
    from harness.job_setup import model_label

    written = json.loads(open(os.path.join(tiny_untied, "config.json")).read())
    old = {k: v for k, v in written.items() if v is not None and k != "rope_parameters"}
    old.update(rope_theta=written["rope_parameters"]["rope_theta"], rope_scaling=None, transformers_version="4.57.1")
    hashes, agreed = [], []
    for name, config in (("v5", written), ("v4", old), ("other", {**old, "rms_norm_eps": 1e-5})):
        shutil.copytree(tiny_untied, tmp_path / name)
        (tmp_path / name / "config.json").write_text(json.dumps(config, indent=2))
        (tmp_path / name / "generation_config.json").write_text('{"_from_model_config": true}')
        hashes.append(model_label(OmegaConf.create({"model": {"path": str(tmp_path / name)}}), str(tmp_path / name)))
        agreed.append(EngineConfig(str(tmp_path / name), device="cpu").agreed())
    assert hashes[0][1] == hashes[1][1] != hashes[2][1] and agreed[0] == agreed[1] != agreed[2]


@pytest.mark.slow
def test_a_row_holds_its_own_run(tmp_path, model_cache, tiny_untied):
    """Three repeats of a workload that hits the prefix cache: each row counts its own hits (not a running
    total), has its own time stamp and run id, names the checkpoint given by model.path and its hash, and
    records the CPU it ran on and the torch threads asked for."""
    res = harness("tp=1", "workload=latency", "workload.output_len=16", "llm.kvcache_block_size=16", "repeat=3",
                  f"model.path={tiny_untied}", "cpu_threads=1", f"results_dir={tmp_path}", "progress=false",
                  cache=model_cache)
    assert res.returncode == 0, res.stderr[-2000:]
    df = pd.read_csv(tmp_path / "runs.csv")
    assert len(df) == 3
    hits = df.prefix_cache_hit_tokens.tolist()
    assert hits[0] > 0 and len(set(hits)) == 1 and all(h <= n for h, n in zip(hits, df.input_tokens))
    assert df.run_id.nunique() == 3 and df.time_utc.is_monotonic_increasing
    assert set(df.model) == {os.path.basename(tiny_untied)} and df.model_hash.nunique() == 1
    assert set(df.cpu_threads) == {1} and df.cpu_cores.iloc[0] == os.cpu_count() and df.load_avg_1m.notna().all()
    assert df.hydra_dir.notna().all() and os.path.isdir(df.hydra_dir.iloc[0])
    # the repeats' medians and spread, as a sweep's (a new user's trial: one job printed three blocks, no summary)
    assert "== repeats: 1 job, 3 ok rows ==" in res.stdout and "median over ok repeats" in res.stdout


@pytest.mark.slow
def test_a_row_that_cannot_be_written_is_never_lost(tmp_path, model_cache):
    """The lock file cannot be created: the numbers are printed, the row goes to a fallback file beside the
    results, one line says where, exit code 1. An unwritable results directory is refused before anything
    runs (exit 2)."""
    os.mkdir(tmp_path / "runs.csv.lock")  # FileLock cannot create its lock file there
    res = harness("tp=1", "workload=smoke", f"results_dir={tmp_path}", "progress=false", cache=model_cache)
    assert res.returncode == 1, res.stderr[-2000:]
    assert "throughput" in res.stdout and "Traceback" not in res.stderr
    fallback = list(tmp_path.glob("runs.unwritten-*.csv"))
    assert len(fallback) == 1 and f"the row went to {fallback[0]}" in res.stderr
    assert pd.read_csv(fallback[0]).status.tolist() == ["ok"]
    res = harness("tp=1", "workload=smoke", "results_dir=/sys/kernel", "progress=false", cache=model_cache)
    assert res.returncode == 2 and res.stderr.strip().startswith("error: cannot write results to /sys/kernel")


@pytest.mark.slow
def test_gloo_starts_with_a_small_timeout_s(tmp_path, model_cache):
    """timeout_s bounds waits once running; joining the planes at start-up is bounded by startup_timeout_s."""
    res = harness("control=gloo", "tp=2", "workload=smoke", "llm.timeout_s=2", f"results_dir={tmp_path}",
                  "progress=false", cache=model_cache)
    assert res.returncode == 0, res.stderr[-2000:]


def semaphores() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("sem.mp-")}


def opened_by(proc) -> set[str]:
    """The named semaphores that run ``proc`` (its process and children) has mapped: on a shared machine, other
    runs create and remove theirs meanwhile, so what appeared in /dev/shm is not all this run's."""
    names = set()
    for pid in [proc.pid, *children(proc.pid)]:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as f:
            names |= {os.path.basename(line.split()[5]) for line in f if "/dev/shm/sem.mp-" in line}
    return names


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_sigkilled_runs_semaphores_are_removed_by_the_next_run(tmp_path, model_cache):
    """Every process of a shm run SIGKILLed (the resource tracker too): its named semaphores stay in /dev/shm;
    the next run removes them, and never those of a run that is alive."""
    env = {**os.environ, "TPCP_CACHE": model_cache}

    def start(control, name):
        return subprocess.Popen([sys.executable, "-m", "harness", f"control={control}", "tp=2", "workload=bench",
                                 "repeat=50", "progress=false", f"results_dir={tmp_path}/{name}"], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def new_semaphores(proc, at_least=1):
        deadline = time.monotonic() + 120
        while len(opened_by(proc)) < at_least and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2.0)  # whatever else the plane creates
        return opened_by(proc)

    live = start("queue", "live")
    victim = None
    try:
        live_sems = new_semaphores(live)
        assert live_sems, "the live run created no named semaphore"
        victim = start("shm", "victim")
        victim_sems = new_semaphores(victim, at_least=2)
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(timeout=30)
        time.sleep(1.0)
        assert victim_sems <= semaphores(), "SIGKILL of every process should leave the run's semaphores behind"
        res = harness("control=shm", "tp=2", "workload=smoke", f"results_dir={tmp_path}/next", "progress=false",
                      cache=model_cache)
        assert res.returncode == 0, res.stderr[-2000:]
        assert not (semaphores() & victim_sems), "the dead run's semaphores are still there"
        assert live.poll() is None and live_sems <= semaphores(), "a live run's semaphores were touched"
    finally:
        for proc in (victim, live):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("overrides, message", [
    (["control=ring", "control.options.segment_bytes=4096"], "control=ring has no option 'segment_bytes'"),
    (["+anything=1"], "unknown config key 'anything'"),
    (["llm.max_model_len=-5"], "llm.max_model_len must be >= 1, got -5"),
])
def test_bad_overrides_are_one_line_and_exit_2(overrides, message, tmp_path, model_cache):
    res = harness(*overrides, "workload=smoke", f"results_dir={tmp_path}", cache=model_cache)
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.strip() == f"error: {res.stderr.strip()[7:]}" and message in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not list(tmp_path.glob("*.csv"))


@pytest.mark.slow
def test_model_auto_says_which_preset_it_took(tmp_path, model_cache):
    res = harness("tp=1", "workload=smoke", f"results_dir={tmp_path}", "progress=false", cache=model_cache)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "model=auto: qwen3-tiny on cpu" in res.stdout
    assert pd.read_csv(tmp_path / "runs.csv").model.tolist() == ["qwen3-tiny"]


@pytest.mark.slow
def test_the_cpu_scale_down_is_said_and_a_key_set_on_the_command_line_wins(tmp_path, model_cache):
    """A new user's trial: workload=latency-4k on CPU ran 240-token prompts under its own name, and nothing said so."""
    res = harness("tp=1", "workload=latency-4k", "workload.iterations=1", f"results_dir={tmp_path}", "progress=false",
                  cache=model_cache)
    assert res.returncode == 0, res.stderr[-2000:]
    assert ("workload=latency-4k on CPU: its cpu: block applies (input_len 3968 -> 240); a key set on the command "
            "line wins") in res.stdout
    assert pd.read_csv(tmp_path / "runs.csv").input_tokens.tolist() == [240]


def test_the_cpu_scale_down_note_wraps_between_its_items_never_inside_one():
    """A session's note: the bench's note wrapped inside "min_output_len 100 -> 16"."""
    from harness.job_setup import scale_down_note

    scaled = {"num_seqs": (256, 16), "min_input_len": (100, 16), "max_input_len": (1024, 128),
              "min_output_len": (100, 16), "max_output_len": (1024, 64)}
    lines = scale_down_note("bench", scaled).splitlines()
    assert len(lines) == 2 and all(len(line) <= 120 for line in lines)
    assert all(any(f"{k} {a} -> {b}" in line for line in lines) for k, (a, b) in scaled.items())
    assert lines[0].startswith("workload=bench on CPU: its cpu: block applies (num_seqs 256 -> 16,")


def test_a_run_a_worker_stalled_in_is_written_stalled_and_left_out_of_the_medians(tmp_path, monkeypatch, capsys):
    """A worker silent for seconds mid-run (SIGSTOP, the GIL held) once left an ok row: --compare and the repeats'
    medians took its inflated latencies in. Its row is ``stalled`` now, numbers kept, the silence its ``error``."""
    from omegaconf import OmegaConf

    from harness import analyze, app
    from harness.results_csv import Results
    from harness.schema import COLUMNS, SCHEMA_VERSION

    metrics = {"output_tok_s": 100.0, "tpot_ms_p50": 9.0, "output_tokens": 8, "total_tok_s": 120.0, "req_s": 1.0,
               "duration_s": 0.5, "prefill_steps": 1, "decode_steps": 7}
    monkeypatch.setattr(app, "timed_run", lambda *a: (metrics, [], {1: 3.24}))
    monkeypatch.setattr(app, "SWEEP_ROWS", [])
    cfg = OmegaConf.create({"nvml_interval_s": 0.1, "step_log": False, "save_requests": False, "profile": "none",
                            "progress": False})
    results = Results(str(tmp_path / "runs.csv"), COLUMNS, SCHEMA_VERSION)
    row0 = {"schema_version": SCHEMA_VERSION, "control": "shm", "tp": 2, "workload": "smoke", "repeat": 0}
    for run in ("a", "b"):  # the new-user trial (session 31): its job exited 0, as an ok one does (now 1)
        assert app.run_repeat(cfg, None, SimpleNamespace(arrivals=None), results, {**row0, "run_id": run}, [])
    out, err = capsys.readouterr()
    assert out.count("[stalled]") == 2 and out.count("100.0 output tok/s") == 2
    # the new-user trial (session 38): exit 1 with nothing on stderr, where every other failure says why
    assert err.count("error: repeat 0 stalled: rank 1 was silent for 3.2 s in this run") == 2, err
    assert "warning     rank 1 was silent for 3.2 s in this run (stopped, or stuck holding the GIL): its " \
           "latencies include that (the analysis leaves the row out)" in out
    assert app.SWEEP_ROWS == []  # the sweep's summary takes ok rows
    rows = pd.read_csv(tmp_path / "runs.csv")
    assert list(rows.status) == ["stalled"] * 2 and list(rows.output_tok_s) == [100.0] * 2
    pd.concat([rows.assign(status="ok", run_id=["c", "d"]), rows]).to_csv(tmp_path / "runs.csv", index=False)
    assert analyze.main([str(tmp_path / "runs.csv")]) == 0
    out, err = capsys.readouterr()  # the files read on stderr
    assert "4 row(s), 2 ok, 0 failed, 2 stalled (left out like the failed)" in err
    assert "  2 stalled: rank 1 was silent for 3.2 s in this run" in err and "| 2 (+2 stalled) |" in out, out


@pytest.mark.parametrize("repeat, repeats, line", [(1, 4, "repeats 2-3 did not run"), (1, 3, "repeat 2 did not run"),
                                                   (2, 3, None), (0, 1, None)])
def test_a_failed_repeat_says_which_repeats_did_not_run(repeat, repeats, line, tmp_path, capsys):
    """The new-user trial (session 38): a worker killed in repeat 1 of 3 left repeat 2 without a row or a word."""
    from harness.job_setup import failed
    from harness.results_csv import Results
    from harness.schema import COLUMNS, SCHEMA_VERSION

    results = Results(str(tmp_path / "runs.csv"), COLUMNS, SCHEMA_VERSION)
    row0 = {"schema_version": SCHEMA_VERSION, "control": "shm", "tp": 2, "workload": "smoke", "run_id": "r"}
    assert failed(results, row0, repeat, RuntimeError("rank 1 died"), repeats) == 1
    out, err = capsys.readouterr()
    assert err == "error: RuntimeError: rank 1 died\n" and "[failed]" in out
    assert (f"  the job stopped at repeat {repeat}: {line}" in out) if line else "did not run" not in out, out
