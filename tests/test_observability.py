"""What every run records beside its timings: the GPUs' energy from NVML's counter (a fake NVML here), empty
cells with the reason on CPU; the versions of what ran (driver, transformers, Triton); and profile=torch's
trace per rank of a window of the timed run's steps."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
from types import SimpleNamespace

import pandas as pd
import pynvml
import pytest
import torch
from helpers import harness

from engine import LLM, ConfigError, EngineConfig, SamplingParams
from engine.model_runner import ModelRunner
from engine.profiling import PROFILE, ProfiledEndpoint, ProfiledRunner, StepProfiler, parse_window, trace_path
from harness import job_setup, metrics
from harness.metrics import NvmlSampler, energy_per_token
from harness.preflight import check_command
from harness.report import gpu_lines, print_summary, trace_lines


class EnergyNvml:
    """NVML with GPUs at PCI buses 0x1a, 0x1b whose total-energy counters (mJ) read ``readings[i]`` at the
    i-th read of each GPU; ``supported=False``: the counter raises NVML_ERROR_NOT_SUPPORTED (pre-Volta)."""

    def __init__(self, readings, supported: bool = True):
        self.readings, self.supported = readings, supported
        self.reads = {0: 0, 1: 0}

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetPciInfo(self, handle):
        return SimpleNamespace(domain=0, bus=0x1A + handle, device=0)

    def nvmlDeviceGetName(self, handle):
        return b"Fake H200"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if not self.supported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        value = self.readings[self.reads[handle]][handle]
        self.reads[handle] += 1
        return value


@pytest.fixture
def two_gpus(monkeypatch):
    """cuda:0 and cuda:1 at the fake's PCI addresses (no CUDA needed)."""
    real = metrics.match_handles
    monkeypatch.setattr(metrics, "match_handles",
                        lambda indices, nvml: real(indices, nvml, address=lambda i: (0, 0x1A + i, 0)))


def run_sampler(nvml) -> dict:
    sampler = NvmlSampler([0, 1], interval_s=60, nvml=nvml)  # no utilisation sample within the test
    sampler.start()
    sampler.stop()
    return sampler.summary()


def test_energy_is_the_counters_difference_summed_over_the_gpus(two_gpus):
    """mJ at stop minus mJ at start, per GPU, summed, in J; per output token it divides by the tokens."""
    nvml = EnergyNvml([(1_000_000, 5_000_000), (1_150_000, 5_250_500)])
    gpu = run_sampler(nvml)
    assert gpu["gpu_energy_j"] == pytest.approx(150.0 + 250.5) and gpu["nvml"] == "pci"
    assert nvml.reads == {0: 2, 1: 2}  # read once before and once after the run
    assert energy_per_token(gpu["gpu_energy_j"], 801)["j_per_output_token"] == pytest.approx(0.5)


def test_a_gpu_without_the_counter_leaves_the_energy_empty_and_says_why(two_gpus):
    gpu = run_sampler(EnergyNvml([], supported=False))
    assert gpu["gpu_energy_j"] is None and gpu["nvml"] == "pci; no energy counter (Not Supported)"
    assert energy_per_token(gpu["gpu_energy_j"], 100)["j_per_output_token"] is None


def test_a_counter_that_goes_backwards_is_not_a_negative_energy(two_gpus):
    gpu = run_sampler(EnergyNvml([(9_000, 9_000), (1_000, 9_500)]))
    assert gpu["gpu_energy_j"] is None and "went backwards" in gpu["nvml"]


def test_on_cpu_the_energy_cells_are_empty_and_nvml_says_why():
    sampler = NvmlSampler([], nvml=EnergyNvml([]))  # no CUDA device in the run
    sampler.start()
    sampler.stop()
    gpu = sampler.summary()
    assert gpu["gpu_energy_j"] is None and gpu["nvml"] == "no GPU in this run"
    assert energy_per_token(None, 599) == {"j_per_output_token": None}
    assert energy_per_token(12.0, 0) == {"j_per_output_token": None}  # no token: no ratio, not a division error


def test_the_gpu_line_carries_the_energy_when_there_is_one(capsys):
    row = {"status": "ok", "engine": "tp", "control": "shm", "tp": 2, "model": "qwen3-0.6b", "device": "cuda",
           "output_tok_s": 1.0, "total_tok_s": 2.0, "req_s": 1.0, "output_tokens": 801, "duration_s": 1.0,
           "gpu_util_pct_mean": 97.3, "gpu_util_pct_max": 100.0, "gpu_mem_used_mib_max": 80123.0,
           "gpu_power_w_mean": 650.2, "gpu_energy_j": 400.5, "j_per_output_token": 0.5, "nvml": "pci"}
    print_summary(row, "/tmp/x/runs.csv")
    lines = capsys.readouterr().out.splitlines()
    assert "  GPU         busy 97.3% of the time on average (max 100.0%), 80123 MiB at most, 650.2 W" in lines
    assert " " * 14 + "400.5 J over the timed run, 0.5000 J per output token" in lines
    assert max(len(line) for line in lines) <= 120
    assert gpu_lines({**row, "gpu_energy_j": None, "j_per_output_token": None})[-1].endswith("650.2 W")
    assert gpu_lines({"nvml": "no GPU in this run"}) == ["  GPU         not measured: no GPU in this run"]


class DriverNvml:
    """NVML that reports driver ``version`` (bytes, as older nvidia-ml-py returns it), or fails to start."""

    def __init__(self, version=b"570.124.06", starts: bool = True):
        self.version, self.starts, self.shut = version, starts, False

    def nvmlInit(self):
        if not self.starts:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    def nvmlSystemGetDriverVersion(self):
        return self.version

    def nvmlShutdown(self):
        self.shut = True


def test_the_driver_version_comes_from_nvml_and_is_empty_without_a_driver():
    nvml = DriverNvml()
    assert job_setup.driver_version(nvml) == "570.124.06" and nvml.shut
    assert job_setup.driver_version(DriverNvml("580.65")) == "580.65"
    assert job_setup.driver_version(DriverNvml(starts=False)) is None


def installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def test_a_row_names_the_versions_of_what_ran(monkeypatch):
    """transformers and Triton as installed (empty where not), the driver only on a CUDA run."""
    row = job_setup.metadata("cpu")
    assert row["driver_version"] is None and row["transformers_version"] == installed("transformers")
    assert row["triton_version"] == (installed("triton") or installed("pytorch-triton")
                                     or installed("pytorch-triton-rocm"))
    assert job_setup.package_version("no-such-package-tpcp") is None
    assert job_setup.package_version("no-such-package-tpcp", "transformers") == installed("transformers")
    monkeypatch.setattr(job_setup, "driver_version", lambda: "570.124.06")
    assert job_setup.metadata("cuda")["driver_version"] == "570.124.06"


# --- profile=torch: the window, the trace files, the settings' checks -------------------------------------


class CountingRunner:
    """A model runner that does a little CPU work per step and counts its steps."""

    def __init__(self):
        self.steps, self.num_kvcache_blocks = 0, 7

    def run(self, step: bytes):
        self.steps += 1
        return torch.ones(64, 64) @ torch.ones(64, 64)


def profiled_pass(tmp_path, window, steps: int, rank: int = 0):
    """Arm a profiler with ``window``, run ``steps`` steps through ProfiledRunner, finish: (trace or None,
    the runner)."""
    profiler = StepProfiler(window, rank, "cpu")
    runner = ProfiledRunner(CountingRunner(), profiler, worker=rank > 0)
    profiler.arm(str(tmp_path / "traces" / "run"))
    if rank > 0:
        profiler.before_step()  # as ProfiledEndpoint after "arm"
    for _ in range(steps):
        if rank == 0:
            profiler.before_step()  # as LLM.call before the send
        runner.run(b"")
    return profiler.finish(), runner


def step_labels(path) -> list[str]:
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    return sorted({e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")})


def test_the_window_is_recorded_with_the_runs_own_step_numbers(tmp_path):
    path, runner = profiled_pass(tmp_path, (1, 3), steps=6, rank=1)
    assert path == str(tmp_path / "traces" / "run_rank1.json") and runner.steps == 6
    assert step_labels(path) == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    assert runner.num_kvcache_blocks == 7  # every other attribute is the runner's


def test_a_window_past_the_end_writes_no_trace_and_none_means_every_step(tmp_path):
    assert profiled_pass(tmp_path, (20, 40), steps=6)[0] is None
    assert not (tmp_path / "traces" / "run_rank0.json").exists()
    path, _ = profiled_pass(tmp_path, None, steps=3)
    assert step_labels(path) == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]
    path, _ = profiled_pass(tmp_path, (2, 9), steps=4)  # the run ends inside the window: written at finish
    assert step_labels(path) == ["ProfilerStep#2", "ProfilerStep#3"]


def test_an_unarmed_profiler_records_nothing(tmp_path):
    profiler = StepProfiler((0, 1), 0, "cpu")
    runner = ProfiledRunner(CountingRunner(), profiler, worker=False)
    runner.run(b"")
    assert profiler.prof is None and not profiler.recording and profiler.finish() is None


class ScriptedEndpoint:
    def __init__(self, messages):
        self.messages, self.stats_taken = list(messages), False

    def recv(self):
        return self.messages.pop(0)

    def take_recv_stats(self):
        self.stats_taken = True


def test_a_worker_carries_out_profile_messages_and_its_loop_never_sees_them(tmp_path):
    profiler = StepProfiler((0, 0), 1, "cpu")
    prefix = str(tmp_path / "traces" / "abc")
    endpoint = ProfiledEndpoint(ScriptedEndpoint([(PROFILE, ("arm", prefix)), ("run", (b"",)),
                                                  (PROFILE, ("finish",)), ("exit", ())]), profiler)
    assert endpoint.recv() == ("run", (b"",)) and profiler.path == trace_path(prefix, 1)
    ProfiledRunner(CountingRunner(), profiler, worker=True).run(b"")
    assert endpoint.recv() == ("exit", ())
    assert os.path.isfile(trace_path(prefix, 1)) and profiler.path is None
    endpoint.take_recv_stats()  # every other attribute is the endpoint's
    assert endpoint._endpoint.stats_taken


@pytest.mark.parametrize("value, window", [(None, None), ("20-40", (20, 40)), ("1-3", (1, 3)), (5, (5, 5)),
                                           ("7", (7, 7)), ("0-0", (0, 0))])
def test_profile_steps_is_a_window_of_step_numbers(value, window):
    assert parse_window(value) == window


@pytest.mark.parametrize("settings, message", [
    ({"profile": "foo"}, "profile must be one of none, torch, got 'foo'"),
    ({"profile_steps": "40-20"}, "profile_steps=40-20: the first step is after the last"),
    ({"profile_steps": "abc"}, "profile_steps must be FIRST-LAST or N"),
    ({"profile_steps": "-3"}, "profile_steps must be FIRST-LAST or N"),
    ({"profile_steps": "1-2-3"}, "profile_steps must be FIRST-LAST or N"),
    ({"profile_steps": True}, "got 'true'"),
])
def test_the_engine_and_the_command_line_refuse_bad_profile_settings_alike(settings, message):
    """One rule (engine/profiling.py), checked by the engine's config and by the harness before Hydra."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        EngineConfig.check_settings(**settings)
    (key, value), = settings.items()
    argv = [f"{key}={'true' if value is True else value}"]
    assert message in check_command(argv)[0]


@pytest.mark.parametrize("value", ["\u00b2", "1-\u0663"])  # digits to str.isdigit; "²" crashed int()
def test_profile_steps_takes_ascii_digits_only(value):
    message = "profile_steps must be FIRST-LAST or N"
    with pytest.raises(ConfigError, match=message):
        EngineConfig.check_settings(profile_steps=value)
    assert message in check_command([f"profile_steps='{value}'"])[0]  # quoted: Hydra's grammar refuses it bare


def test_profile_none_leaves_the_step_path_alone(tiny_untied):
    """profile=none (the default): no profiler, the runner itself on the step path (no wrapper to call); asking
    such an engine for a trace is refused, not silently ignored (the new-user trial, session 24)."""
    with LLM(tiny_untied, tensor_parallel_size=1, device="cpu", num_kvcache_blocks=8, max_model_len=256,
             max_num_batched_tokens=256) as llm:
        assert llm.profiler is None and type(llm.runner) is ModelRunner
        for call in (lambda: llm.start_profile("/tmp/x"), llm.finish_profile):
            with pytest.raises(ConfigError, match='built without profile="torch"'):
                call()
        assert llm.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=2))[0]["token_ids"]


def test_the_printout_names_each_trace_or_why_there_is_none(tmp_path):
    here = tmp_path / "r_rank0.json"
    here.write_text("{}")
    lines = trace_lines([str(here), str(tmp_path / "r_rank1.json")], "1-3", 8)
    assert lines[0].startswith(f"trace       {here} (rank 0;") and lines[1].endswith("(not on this host: another "
                                                                                    "node's, or not written)")
    assert trace_lines([], "20-40", 8) == ["traces      none: profile_steps=20-40 starts after the timed run's 8 "
                                           "steps (numbered from 0)"]


@pytest.mark.slow
def test_profile_torch_writes_a_chrome_trace_per_rank(tmp_path, model_cache):
    res = harness("control=shm", "tp=2", "device=cpu", "workload=smoke", "profile=torch", "profile_steps=1-3",
                  f"results_dir={tmp_path}", "progress=false", cache=model_cache)
    assert res.returncode == 0, res.stderr[-2000:]
    df = pd.read_csv(tmp_path / "runs.csv")
    row = df.iloc[0]
    assert len(df) == 1 and row.status == "ok" and "profile=torch profile_steps=1-3" in row.overrides
    assert row.ctrl_calls == row.prefill_steps + row.decode_steps  # the profiling messages are not counted
    assert pd.isna(row.gpu_energy_j) and pd.isna(row.j_per_output_token) and pd.isna(row.driver_version)
    for rank, opener in ((0, "send"), (1, "recv")):
        path = tmp_path / "traces" / f"{row.run_id}_rank{rank}.json"
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        assert {"ProfilerStep#1", "ProfilerStep#3", "step launch"} <= {e.get("name") for e in events}
        assert f"trace       {path}" in res.stdout
        # session 52's trial: each window opened at run(), so the send or recv in it was the next step's
        assert first_range_of_each_step(events) == {f"ProfilerStep#{k}": opener for k in (1, 2, 3)}


def first_range_of_each_step(events: list[dict]) -> dict[str, str]:
    """The first of the send, recv and step launch ranges inside each ``ProfilerStep#k`` of a Chrome trace (the
    host's: on CUDA each label has a copy on the GPU's timeline too)."""
    host = [e for e in events if e.get("cat") == "user_annotation"]
    steps = [e for e in host if str(e.get("name", "")).startswith("ProfilerStep#")]
    ranges = sorted((e for e in host if e.get("name") in ("send", "recv", "step launch")), key=lambda e: e["ts"])
    return {s["name"]: next(r["name"] for r in ranges if s["ts"] <= r["ts"] < s["ts"] + s["dur"]) for s in steps}


def test_engine_hf_runs_every_iteration_of_the_workload(tmp_path, model_cache, monkeypatch):
    """Session 52's trial: engine=hf ran workload=latency's batch once whatever ``iterations`` said, so its row
    counted 1 request and 16 tokens where the engine's, under the same overrides, counted 2 and 32."""
    from harness import app
    from harness.preflight import hydra_compose

    monkeypatch.setenv("TPCP_CACHE", model_cache)
    with hydra_compose() as compose:
        cfg = compose(["engine=hf", "model=qwen3-tiny", "tp=1", "device=cpu", "workload=latency", "progress=false",
                       "workload.cpu.iterations=2", "workload.output_len=16", f"results_dir={tmp_path}"])
    assert app.run_hf_job(cfg) == 0
    row = pd.read_csv(tmp_path / "runs.csv").iloc[0]
    assert (row.num_requests, row.input_tokens, row.output_tokens) == (2, 64, 32)


def test_every_hf_repeat_samples_the_same_gpus(tmp_path, model_cache, monkeypatch):
    """engine=hf with repeat=2: the second repeat's sampler got the first one's summary (a dict) as its GPU
    list, so its row read NVML for the summary's keys, not for the run's GPUs (a helper's review)."""
    from harness import app
    from harness.preflight import hydra_compose

    seen = []

    class Recording(NvmlSampler):
        def __init__(self, indices, *args, **kwargs):
            seen.append(list(indices))
            super().__init__(indices, *args, **kwargs)

    monkeypatch.setattr(app, "NvmlSampler", Recording)
    monkeypatch.setenv("TPCP_CACHE", model_cache)
    with hydra_compose() as compose:
        cfg = compose(["engine=hf", "model=qwen3-tiny", "tp=1", "device=cpu", "workload=smoke", "repeat=2",
                       "progress=false", f"results_dir={tmp_path}"])
    assert app.run_hf_job(cfg) == 0
    rows = pd.read_csv(tmp_path / "runs.csv")
    assert seen == [[], []] and len(rows) == 2
    # session 38's trial: empty, the busy check took transformers' generate for one thread where it runs on all
    assert list(rows.cpu_threads) == [torch.get_num_threads()] * 2
