"""The Hydra command, run as a user runs it: a subprocess that appends a valid row; bad input fails fast."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from helpers import ROOT, harness, orphaned_workers  # noqa: F401

from harness.schema import COLUMNS

pytestmark = pytest.mark.slow  # every test here starts processes

def test_main_job_appends_a_valid_row(tmp_path, model_cache):
    res = harness("control=shm", "tp=2", "workload=smoke", f"results_dir={tmp_path}", "progress=false",
                  cache=model_cache)
    assert res.returncode == 0, res.stderr[-2000:]
    df = pd.read_csv(tmp_path / "runs.csv")
    assert list(df.columns) == COLUMNS and len(df) == 1
    row = df.iloc[0]
    assert row.status == "ok" and row.control == "shm" and row.tp == 2 and row.device == "cpu"
    assert row.output_tokens > 0 and row.output_tok_s > 0 and row.total_tok_s > row.output_tok_s
    assert row.ttft_ms_p50 > 0 and row.e2el_ms_p99 >= row.e2el_ms_p50 >= row.ttft_ms_p50
    assert row.ctrl_calls == row.prefill_steps + row.decode_steps and row.ctrl_oneway_us_p50 > 0
    assert row.ctrl_launch_lag_us_p99 >= row.ctrl_launch_lag_us_p50  # both measured (p50 may be < 0)
    assert pd.notna(row.ctrl_launch_lag_us_mean)
    assert pd.isna(row.gpu_util_pct_mean) and row.nvml == "no GPU in this run"  # empty, with the reason
    assert pd.isna(row.gpu_energy_j) and pd.isna(row.j_per_output_token) and pd.isna(row.driver_version)
    assert row.transformers_version and row.torch_version
    assert "row appended to" in res.stdout and "the last worker finishes a step" in res.stdout
    assert "GPU         not measured: no GPU in this run" in res.stdout and "None" not in res.stdout

    res = harness("control=shm", "tp=1", "workload=smoke", f"results_dir={tmp_path}", "progress=false",
                  cache=model_cache)
    assert res.returncode == 0, res.stderr[-2000:]
    df = pd.read_csv(tmp_path / "runs.csv")
    assert len(df) == 2 and list(df.tp) == [2, 1]
    assert pd.isna(df.ctrl_launch_lag_us_p50[1])  # tp=1: no worker to lag
    # and no one-way latency to put on a clock (session 35's audit: "same host clock", 0.0 read as measured)
    assert pd.isna(df.clock_sync[1]) and pd.isna(df.clock_uncertainty_us[1]) and df.clock_sync[0] == "same host clock"


BAD_INPUT = [
    (["control=nope"], "unknown control 'nope'"),
    (["workload=nope"], "unknown workload 'nope'"),
    (["model=nope"], "unknown model 'nope'"),
    (["tp=0"], "tp must be an integer >= 1"),
    (["tp=3"], "does not divide num_attention_heads"),
    (["model.path=/nonexistent/ckpt"], "checkpoint directory not found"),
    (["repeat=0"], "repeat must be an integer >= 1"),
    (["seed=abc"], "seed must be an integer"),
    (["foo=1"], "unknown config key 'foo'"),
    (["llm.foo=1"], "unknown config key 'llm.foo'"),
    (["workload.iterations=-1"], "workload=smoke has no key 'iterations'"),  # latency has it, smoke not
    (["workload=latency-b8", "workload.iterations=0"], "workload.iterations must be an integer >= 1"),  # inherited
    (["llm.max_model_len=abc"], "max_model_len must be an integer"),
    (["llm.num_kvcache_blocks=0"], "num_kvcache_blocks must be -1"),
    (["tp=2", "llm.startup_timeout_s=0.001"], "llm.startup_timeout_s must be in [1, 1,000,000] (s), got 0.001"),
    (["llm.timeout_s=0.5"], "llm.timeout_s must be in [1, 1,000,000] (s)"),
    # session 29's break test: an OverflowError after start-up (timedelta, a C int), exit 1 and a failed row
    (["llm.timeout_s=1e14"], "llm.timeout_s must be in [1, 1,000,000] (s), got 1e+14"),
    (["-m", "llm.timeout_s=5,1e300"], "llm.timeout_s must be in [1, 1,000,000] (s), got 1e+300"),
    (["tp=2", "llm.startup_timeout_s=1e14"], "llm.startup_timeout_s must be in [1, 1,000,000] (s)"),
    (["llm.max_model_len=8"], "max_model_len=8"),
    (["llm.gemm=cublas"], "gemm=cublas needs device=cuda"),
    (["-m", "llm.gemm=auto,cublas"], "llm.gemm=cublas needs device=cuda"),  # before the auto job runs
    (["-m", "llm.max_num_seqs=8,0"], "llm.max_num_seqs must be >= 1, got 0"),
    (["-m", "llm.kvcache_block_size=256,100"], "llm.kvcache_block_size must be a power of two"),  # were job-time
    (["-m", "llm.gpu_memory_utilization=0.9,1.5"], "llm.gpu_memory_utilization must be in (0, 1]"),
    # found by the session-4 break test (each ran a job, or printed Hydra's several lines, before):
    (["-m", "tp=1,abc"], "tp must be an integer >= 1, got 'abc'"),  # the schema's type, in the key's own words
    (["~workload.iterations", "workload=smoke"], "~workload.iterations: no such key to delete"),
    (["+model.preset.num_hidden_layers=1", "model=qwen3-tiny"], "model.preset.num_hidden_layers exists already"),
    (["++workload.iterations=abc", "workload=smoke"], "workload.iterations must be an integer >= 1, got 'abc'"),
    (["tp=1", "-m", "workload=smoke"], "-m goes before the overrides"),
    # a break test: argparse's 8-line usage text (a flag between two overrides; after the last one it works)
    (["tp=1", "--cfg", "job", "seed=1"], "--cfg goes before the overrides (python -m harness --cfg job "),
    (["+tp=2"], "tp exists already: set it without the +"),
    (["-m", "llm.max_num_seqs=choice(8,0)"], "llm.max_num_seqs must be >= 1, got 0"),  # Hydra's sweep functions
    (["-m", "control=glob(zz*)"], "control=glob(zz*) selects nothing; options of control: gloo, hybrid"),  # was
    (["-m", "tp=glob(1*)"], "tp=glob(1*): glob() picks options of a config group"),  # "ConfigLoader is not set"
    (["-m", "++llm.max_num_seqs=8,0"], "llm.max_num_seqs must be >= 1, got 0"),  # ++ sets an existing key too
    (["-m", "workload=smoke,latency", "+workload.iterations=3"], "exists already in workload=latency"),
    (["device=cuda"], "CUDA is not available"),
    (["results_dir=/proc/forbidden"], "cannot write results"),
    (["results_dir="], "results_dir is empty"),
    (["model.path="], "model.path is empty"),
    (["workload.warmup=maybe"], "workload.warmup must be true or false"),
    (["-m", "workload.num_seqs=2,0"], "workload.num_seqs must be an integer >= 1, got 0"),  # before job 0 runs
    # session-5 break test: plane option values were refused only once the job had started its engine, and
    # hybrid's hwm not at all
    (["control=ring", "tp=2", "control.options.spin_us=-1"], "ring option spin_us must be a number >= 0, got -1"),
    # session 49's trial: the value was echoed as -1.0, and a small slot_bytes's not at all
    (["control=hybrid", "tp=2", "control.options.slot_bytes=64"],
     "hybrid option slot_bytes must be > 128 (a slot's header for 1 reader(s)), got 64"),
    (["control=hybrid", "tp=2", "control.options.hwm=abc"], "hybrid option hwm must be an integer >= 1"),
    (["-m", "control=ring,hybrid", "control.options.sleep_us=nan"], "ring option sleep_us must be a number"),
    (["control=zmq", "control.options.hwm=-5"], "zmq option hwm must be an integer >= 1, got -5"),
    (["workload.temperature=1e39"], "workload.temperature must be a number in [0, 3.4e+38]"),  # session 36: no key
    (["control=shm", "control.options.segment_bytes=10"], "shm option segment_bytes must be an integer >= 65"),
    (["-m", "control=ring", "control.options.nslots=16,0"], "ring option nslots must be an integer >= 1, got 0"),
    # session 36's new-user trial: a reader asleep 100 s between polls failed after 21 s, naming no option
    (["-m", "control=ring,hybrid", "tp=2", "control.options.sleep_us=1e8", "llm.timeout_s=10"],
     "ring option sleep_us=1e+08 must be below the timeout, 10 s (llm.timeout_s)"),
    # session-6 break test: a negative hf_batch_size wrote an ok row of 0 tokens; a results_file with a path
    # wrote outside results_dir (or waited out a file lock under /proc); the others were not checked at all
    (["engine=hf", "tp=1", "hf_batch_size=-3"], "hf_batch_size must be an integer >= 1, got '-3'"),
    (["nvml_interval_s=0"], "nvml_interval_s must be a number > 0, got '0'"),  # session 53's trial: got '0.0'
    # session 51's new-user trial: engine=hf took any dtype, then failed its run (exit 1) on torch.nope
    (["engine=hf", "dtype=nope"], "dtype 'nope' is not one engine=hf takes; use auto, bfloat16, float16, float32"),
    (["-m", "engine=hf", "dtype=float32,int8"], "dtype 'int8' is not one engine=hf takes"),
    # session 52's new-user trial: the row was written, then harness.analyze failed on it (no int64 holds it)
    (["workload=serve", "workload.max_concurrency=99999999999999999999"],
     "workload.max_concurrency=99999999999999999999 is beyond 2^63 - 1, the largest integer a results column holds"),
    (["-m", "workload=latency", "workload.iterations=2,99999999999999999999"], "workload.iterations=999999999"),
    (["control=ring", "control.options.nslots=99999999999999999999"], "control.options.nslots=99999999999999999999 is"),
    (["results_file=/etc/x.csv"], "results_file must be a file name inside results_dir"),
    (["results_file=."], "results_file must be a file name inside results_dir"),
    (["nvml_interval_s=0"], "nvml_interval_s must be a number > 0"),
    (["progress=maybe"], "progress must be true or false, got 'maybe'"),
    (["reuse_engine=2"], "reuse_engine must be true or false, got '2'"),
    (["step_log=yes"], "step_log must be true or false, got 'yes'"),
    (["workload.min_input_len=50", "workload.max_input_len=40"], "min_input_len=50 is above workload.max_input_len=40"),
    # session-6 break test, left then and fixed in session 7: a traceback from transformers, a bogus key
    # accepted, the tp=3 job of a sweep failing after the tp=2 job had run, a 2 GB segment allocated
    (["model.preset.rms_norm_eps=abc"], "model.preset.rms_norm_eps must be a number > 0, got 'abc'"),
    (["model=qwen3-tiny", "model.preset.tie_word_embeddings=maybe"], "'tie_word_embeddings' expected bool"),
    (["+model.preset.bogus_field=1"], "model.preset.bogus_field is not a transformers.Qwen3Config field"),
    (["-m", "tp=2,3", "device=cpu"], "tp=3 does not divide num_attention_heads=8 of model=qwen3-ti"),
    (["control=shm", "control.options.segment_bytes=2000000000"], "shm: segment_bytes=2000000000 exceeds 1024 MiB"),
    (["profile=foo"], "profile must be one of none, torch, got 'foo'"),
    (["profile=torch", "profile_steps=40-20"], "profile_steps=40-20: the first step is after the last"),
    (["-m", "profile_steps=1-3,abc"], "profile_steps must be FIRST-LAST or N"),  # before the first job runs
    # issue 29: a grammar error exited 1 after Hydra's four lines
    (["tp=[1"], "cannot parse 'tp=[1': no viable alternative at input '[1'"),
    (["-m", "workload.request_rate=2,,4"], "cannot parse 'workload.request_rate=2,,4': extraneous input ','"),
    # session-17 trial: a segfault after the run (thread creation failed), a traceback after the preset was built
    # (and after job 0 in a sweep), a 2.6 GB preflight that never ended, a serve run that slept until killed
    (["cpu_threads=100000"], "cpu_threads must be 0 (cores / tp) or 1-1024, got 100000"),
    (["-m", "seed=0,18446744073709551616"], "seed must be an integer in [0, 2^63 - 1], got '18446744073709551616'"),
    (["device=cpu", "workload=serve", "workload.num_prompts=1000000000"],  # on a CPU: the 128 tokens that run
     "workload.num_prompts=1000000000 x up to 128 prompt tokens is more than 50,000,000 tokens to draw"),
    (["workload=serve", "workload.request_rate=1e-300", "workload.num_prompts=3"],
     "the arrivals would span 3e+300 s (num_prompts / request_rate), over a day"),
    (["workload=bench", "workload.max_input_len=5000"],
     "workload bench asks for sequences of up to 5064 tokens (5000 of prompt + 64 output); the limit is 4096"),
    (["-m", "engine=tp,hf", "workload=serve"], "engine=hf runs offline batches through generate(): workload=serve "
     "needs engine=tp"),  # refused inside its job, after the tp job had run
    # a new-user trial: Hydra's lexer refused a non-ASCII value without saying that quotes take it
    (["tag=ünïcødé"], "LexerNoViableAltException: tag=ünïcødé; 'ü' needs quotes: \"tag='ünïcødé'\" in a shell"),
    (["-m", "tag=a,b&c"], "tag=a,b&c; '&' needs quotes: quote the item with it"),
    # a new-user trial: Hydra's traceback (Could not override 'workload'), exit 1
    (["--hydra-help", "workload=smoke"], "--hydra-help shows Hydra's own options and takes no overrides"),
    # a group of Hydra's own: FileNotFoundError for conf/hydra (a traceback, exit 1)
    (["hydra/launcher=nope"], "unknown hydra/launcher 'nope'; available: basic"),
    (["-m", "hydra/job_logging=none,nope"], "unknown hydra/job_logging 'nope'; available: default, disabled, none"),
]
# a few of each kind, end to end through ``python -m harness``
END_TO_END = {"llm.max_model_len=8", "device=cuda", "results_dir=/proc/forbidden", "control=nope", "tp=3", "foo=1",
              "tp=[1", "tag=ünïcødé", "llm.max_num_seqs=8,0", "repeat=0", "model.path=/nonexistent/ckpt",
              "workload.num_prompts=1000000000", "hydra/launcher=nope"}


def _argv(overrides: list[str], *first: str) -> list[str]:
    lead = overrides[:1] if overrides[0] in ("-m", "--multirun") else []  # Hydra takes -m before overrides only
    return [*lead, "workload=smoke", *first, *overrides[len(lead):]]


@pytest.mark.parametrize("overrides, message", [c for c in BAD_INPUT if set(c[0]) & END_TO_END])
def test_bad_input_is_one_line_and_nonzero(overrides, message, tmp_path, model_cache):
    before = orphaned_workers()
    res = harness(*_argv(overrides, f"results_dir={tmp_path}"), cache=model_cache, timeout=120)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], res.stderr
    assert orphaned_workers() <= before


@pytest.mark.parametrize("overrides, message", BAD_INPUT)
def test_bad_input_is_refused_before_the_first_job_in_one_line(overrides, message):
    """What ``python -m harness`` prints (``error: <line>``, exit 2) before any job, checked in process."""
    from harness.preflight import check_command

    problem, _ = check_command(_argv(overrides))
    assert problem is not None and message in problem and "\n" not in problem, problem


@pytest.mark.parametrize("argv", [
    ["-m", "llm.all_reduce='auto',auto"],           # a sweep whose first value is quoted
    ["-m", "tp=range(1,3)"], ["-m", "device=choice(cpu,auto)"], ["tag='ünïcødé'"], ["-m", "tag=a,'b&c'"],
    ["-m", "tp=1,02"], ["repeat=02"],  # Hydra types 02 as a string; the schema's int takes it as 2
    ["workload=broadcast", "tp=2", "device=cpu", "llm.gemm=cublas"],  # broadcast builds no engine
    ["engine=hf", "llm.gemm=cublas"],                 # nor does engine=hf
    ["+workload.iterations=3"],                       # bench lacks the key: + adds it
    ["++llm.gemm=auto"], ["~llm.gemm"],
    # ++ adds where a selected workload lacks the key: scripts/multi_gpu_sweep.sh was refused on the device
    ["-m", "workload=latency,latency-b8,bench", "++workload.iterations=5"],  # (device=cuda there: refused on CPU)
    ["control=ring", "tp=4", "control.options.spin_us=0", "control.options.nslots=1"],
    ["-m", "control=ring,hybrid", "control.options.idle_ms=0,10"],
    # a pair set together was checked against the other's default (session-6 break test)
    ["workload=smoke", "workload.min_input_len=50", "workload.max_input_len=100"],
    ["workload=smoke", "workload.max_output_len=2", "workload.min_output_len=1"],
    # model=auto's preset with a workload note to compose: a ConfigCompositionException traceback (session 16)
    ["model.preset.vocab_size=5000", "workload=smoke", "workload.max_token_id=100"],
    ["model.preset.vocab_size=5000", "++workload.cpu.num_seqs=2", "workload=smoke"],
    # session 21's new-user trial: checked at the GPU size (200 prompts of up to 1,024 tokens), not the CPU's 24 of 128
    ["device=cpu", "workload=serve", "workload.request_rate=0.001"],
    ["device=cpu", "workload=serve", "workload.num_prompts=100000"],
])
def test_good_overrides_are_not_refused(argv):
    """Found by a break test of the up-front checks: commands that run were refused."""
    from harness.preflight import check_command

    assert check_command(argv)[0] is None


@pytest.mark.parametrize("argv, expected", [
    # a sweep over a group composes its default option first, which may lack the key (shm has no nslots)
    (["-m", "control=ring,hybrid", "control.options.nslots=4"],
     ["-m", "control=ring,hybrid", "++control.options.nslots=4"]),
    (["-m", "workload=latency,latency-b8", "workload.iterations=1"],
     ["-m", "workload=latency,latency-b8", "++workload.iterations=1"]),
    (["model.preset.num_hidden_layers=2"], ["++model.preset.num_hidden_layers=2"]),  # model=auto has no preset
    (["control=ring", "control.options.nslots=4"], ["control=ring", "control.options.nslots=4"]),  # ring has it
    (["model=qwen3-tiny", "model.preset.num_hidden_layers=2"],
     ["model=qwen3-tiny", "model.preset.num_hidden_layers=2"]),
    (["++workload.iterations=3", "tp=2"], ["++workload.iterations=3", "tp=2"]),
    (["~llm.gemm", "tp=2"], ["tp=2"]),  # the llm schema keeps every key: a deleted one is its default
])
def test_keys_every_job_has_reach_hydra_in_a_form_it_takes(argv, expected):
    """Session-6 break test: ``-m control=ring,hybrid control.options.nslots=4`` ended in Hydra's "Key
    'nslots' is not in struct" (seven lines, exit 1) although both planes have the key."""
    from harness.preflight import check_command

    assert check_command(argv) == (None, expected)


def test_a_preset_setting_with_model_auto_reaches_the_preset_it_picks(tmp_path, model_cache):
    """``model.preset.num_hidden_layers=2`` with ``model=auto``: Hydra's "not in struct" without ``++``, and
    with it the setting was dropped (the 4-layer preset ran) while the row recorded it."""
    res = harness("model.preset.num_hidden_layers=2", "tp=1", "workload=smoke", f"results_dir={tmp_path}",
                  "progress=false", cache=model_cache)
    assert res.returncode == 0, res.stderr[-2000:]
    shard = re.search(r"loading rank 0's shard of (\S+)", res.stdout + res.stderr).group(1)
    assert json.load(open(os.path.join(shard, "config.json")))["num_hidden_layers"] == 2
    df = pd.read_csv(tmp_path / "runs.csv")
    assert df.model.iloc[0] == "qwen3-tiny" and df.overrides.iloc[0] == "model.preset.num_hidden_layers=2"


def test_a_run_of_a_drawn_preset_imports_neither_transformers_nor_torch_dynamo(tmp_path, model_cache):
    """Start-up cost every run paid: torch._dynamo (~1.6 s a process on a 2-core CPU, through torch's varlen
    attention, which only CUDA's prefill calls) and transformers (~1 s, to check a preset drawn long ago)."""
    import yaml

    from harness.checkpoint import materialize

    preset = yaml.safe_load(open(os.path.join(ROOT, "conf", "model", "qwen3-tiny.yaml")))["preset"]
    materialize("qwen3-tiny", preset, root=model_cache)  # drawn before, as by any earlier run
    env = {**os.environ, "TPCP_CACHE": model_cache, "PYTHONPROFILEIMPORTTIME": "1"}  # children inherit it
    res = subprocess.run([sys.executable, "-m", "harness", "control=shm", "tp=2", "workload=smoke", "progress=false",
                          f"results_dir={tmp_path}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" in imported and "runtime.worker" in imported  # rank 0's and the worker's lines are there
    assert not {"transformers", "torch._dynamo"} & imported


def test_incomplete_checkpoint_is_rejected(tmp_path, tiny_untied, model_cache):
    broken = tmp_path / "ckpt"
    broken.mkdir()
    config = json.load(open(os.path.join(tiny_untied, "config.json")))
    config["num_hidden_layers"] += 1  # the safetensors file lacks the last layer's tensors
    (broken / "config.json").write_text(json.dumps(config))
    os.symlink(os.path.join(tiny_untied, "model.safetensors"), broken / "model.safetensors")
    res = harness(f"model.path={broken}", "workload=smoke", f"results_dir={tmp_path}", cache=model_cache)
    assert res.returncode == 2
    assert "lacks tensor model.layers.2." in res.stderr and len(res.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("change, message", [
    ({"eos_token_id": "x"}, "eos_token_id must be a token id or a list of them, got 'x'"),
    ({"eos_token_id": [1, "x"]}, "eos_token_id must be a token id or a list of them"),
    ({"rms_norm_eps": "small"}, "rms_norm_eps must be a number > 0, got 'small'"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings must be true or false, got 'yes'"),
    # session 16: KV heads that do not group the query heads failed after start-up (a RuntimeError in SDPA)
    ({"num_key_value_heads": 3}, "num_key_value_heads=3 does not divide num_attention_heads="),
])
def test_a_checkpoint_config_of_the_wrong_types_is_refused_before_anything_starts(change, message, tmp_path,
                                                                                  tiny_untied, model_cache):
    """Session-6 break test: ``"eos_token_id": "x"`` in config.json was refused only after the engine had
    started (a ValueError from its workers)."""
    broken = tmp_path / "ckpt"
    broken.mkdir()
    config = {**json.load(open(os.path.join(tiny_untied, "config.json"))), **change}
    (broken / "config.json").write_text(json.dumps(config))
    os.symlink(os.path.join(tiny_untied, "model.safetensors"), broken / "model.safetensors")
    res = harness(f"model.path={broken}", "tp=2", "workload=smoke", f"results_dir={tmp_path}", cache=model_cache)
    assert res.returncode == 2 and "spawn" not in res.stdout, res.stdout[-2000:]
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], res.stderr
    assert not os.path.exists(tmp_path / "runs.csv")  # bad input: nothing started, no row


@pytest.mark.parametrize("case, message", [
    ("fewer layers in config.json", "tensor(s) its config.json does not describe, e.g. model.layers.1."),
    ("a tensor in two files", "tensor model.embed_tokens.weight is in two files"),
])
def test_a_checkpoint_the_config_does_not_describe_is_refused(case, message, tmp_path, tiny_untied, model_cache):
    """Session-7 break test: config.json saying fewer layers than saved ran the first layers with an ok row
    (transformers refuses it, so the two peers disagreed); a tensor in two files was taken from either."""
    import torch
    from safetensors.torch import save_file

    broken = tmp_path / "ckpt"
    broken.mkdir()
    config = json.load(open(os.path.join(tiny_untied, "config.json")))
    if case.startswith("fewer"):
        config["num_hidden_layers"] = 1
    else:
        save_file({"model.embed_tokens.weight": torch.zeros(config["vocab_size"], config["hidden_size"])},
                  str(broken / "zz-extra.safetensors"))
    (broken / "config.json").write_text(json.dumps(config))
    os.symlink(os.path.join(tiny_untied, "model.safetensors"), broken / "model.safetensors")
    res = harness(f"model.path={broken}", "tp=1", "workload=smoke", f"results_dir={tmp_path}", cache=model_cache)
    assert res.returncode == 2 and message in res.stderr, res.stderr[-2000:]


@pytest.mark.parametrize("engine", ["tp", "hf"])
def test_a_truncated_checkpoint_is_refused_alike_by_both_engines(engine, tmp_path, tiny_untied, model_cache):
    """Session-7 leftover: a truncated safetensors file was refused up front with exit 2 by engine=tp but
    loaded by engine=hf, which failed with a row and exit 1."""
    broken = tmp_path / "ckpt"
    broken.mkdir()
    for name in ("config.json", "model.safetensors"):
        data = open(os.path.join(tiny_untied, name), "rb").read()
        (broken / name).write_bytes(data[: len(data) // 2] if name.endswith(".safetensors") else data)
    res = harness(f"model.path={broken}", f"engine={engine}", "workload=smoke", f"results_dir={tmp_path}/rd",
                  cache=model_cache)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2 and len(lines) == 1, res.stderr[-2000:]
    assert lines[0].startswith("error: cannot read") and "model.safetensors" in lines[0]
    assert not os.path.exists(tmp_path / "rd")  # session 16's trial: the directory was made before the refusal


def test_a_sweep_with_engine_hf_sums_up_its_row_too(tmp_path, model_cache):
    """Session 23's trial: the end-of-sweep summary left out engine=hf's row ("2 jobs, 1 ok row"), and its
    printout said "None prefill and None decode steps"."""
    res = harness("-m", "engine=tp,hf", "tp=1", "workload=smoke", "progress=false", f"results_dir={tmp_path}",
                  cache=model_cache)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "== sweep: 2 jobs, 2 ok rows ==" in res.stdout and "None" not in res.stdout, res.stdout[-3000:]


@pytest.mark.timeout(240)
def test_an_interrupted_sweep_still_sums_up_the_jobs_it_finished(tmp_path, model_cache):
    env = {**os.environ, "TPCP_CACHE": model_cache}
    proc = subprocess.Popen([sys.executable, "-m", "harness", "-m", "tp=1", "workload=smoke,bench", "progress=false",
                             "++workload.scale_on_cpu=false", f"results_dir={tmp_path}"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while not os.path.exists(tmp_path / "runs.csv") and time.monotonic() < deadline:  # the smoke job's row
        time.sleep(0.2)
    time.sleep(3)  # into the full-size bench job
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert "== sweep (interrupted): 2 jobs, 1 ok row, 1 job not ok ==" in out, out[-2000:]
    assert re.search(r"not ok: job 1 \(exit 130\): .*workload=bench", out), out[-2000:]  # which job it was
    assert "the sweep stopped at job 1 (its last job)" in out  # there were no jobs after it
    assert "Traceback" not in err


def test_a_workload_key_only_some_jobs_read_stays_out_of_the_others_rows(tmp_path, model_cache):
    """Session-7 leftover: ``-m workload=smoke,latency ++workload.iterations=1`` put the key into the smoke
    row's overrides although smoke (kind random) never reads it: that row did not pool with smoke rows."""
    res = harness("-m", "workload=smoke,latency", "++workload.iterations=1", "workload.num_seqs=1", "tp=1",
                  f"results_dir={tmp_path}", "progress=false", cache=model_cache)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "note: workload=smoke does not read workload.iterations: not in the row's overrides" in res.stderr
    rows = pd.read_csv(tmp_path / "runs.csv", keep_default_na=False).set_index("workload").overrides
    assert rows["smoke"] == "workload.num_seqs=1" and rows["latency"] == "workload.iterations=1 workload.num_seqs=1"


def test_broadcast_workload_writes_one_row_per_payload(tmp_path, model_cache):
    res = harness("-m", "workload=broadcast", "control=shm,gloo", "tp=2", f"results_dir={tmp_path}", "progress=false",
                  "workload.messages=50", "workload.warmup=5", "workload.min_messages=5",
                  "workload.decode_batches=[1,256]", "workload.prefill_batches=[[100,4096]]",
                  "workload.raw_bytes=[0,2000000]", cache=model_cache)
    assert res.returncode == 0, res.stderr[-2000:]
    df = pd.read_csv(tmp_path / "runs.csv")
    assert len(df) == 2 * 5 and set(df.control) == {"shm", "gloo"} and (df.status == "ok").all()
    assert set(df.payload) == {"decode-1", "decode-256", "prefill-100x4096", "raw-0B", "raw-2000000B"}
    assert res.stdout.count(f"rows appended to {tmp_path / 'runs.csv'}") == 2  # once per job
    big = df[df.payload == "prefill-100x4096"]
    assert (big.payload_bytes > 1 << 20).all()  # larger than nano-vllm's 1 MiB buffer, delivered anyway
    assert (df.ctrl_oneway_us_p50 > 0).all() and (df.ctrl_oneway_us_p99 >= df.ctrl_oneway_us_p50).all()


def test_the_byte_cap_of_a_broadcast_payload_holds_for_its_warm_up_too():
    """A new-user trial: 50 warm-up messages of 16 MiB (840 MB) went out uncapped beside 63 timed ones."""
    from types import SimpleNamespace

    from harness.broadcast import run_broadcast

    class Group:  # counts what run_broadcast sends; every message 1 MiB
        control, tp, sent = SimpleNamespace(name="shm"), 2, []

        def run(self, message, count, gap_s):
            self.sent.append(count)

        def collect_stats(self):
            return {"send": {"nbytes": [1 << 20], "ns": [1000]}, "recv": {1: {"nbytes": [1 << 20], "ns": [5000]}},
                    "silent_s": {}}

    w = dict(kvcache_block_size=256, decode_batches=[], decode_context=16, prefill_batches=[], raw_bytes=[1 << 20],
             warmup=50, messages=2000, min_messages=30, max_bytes_per_payload=8 << 20, gap_us=0)
    group = Group()
    assert [r["payload"] for r in run_broadcast(w, group, progress=False)] == ["raw-1048576B"]
    assert group.sent == [1, 7, 30]  # the size, the rest of an 8 MiB warm-up, min_messages timed


def test_a_failed_broadcast_row_names_the_payload_in_flight(tmp_path, monkeypatch, capsys):
    """Session 52's note: a worker that died mid-broadcast left a failed row with an empty ``payload``."""
    from types import SimpleNamespace

    import pandas as pd

    from engine import WorkerError
    from harness import broadcast
    from harness.preflight import hydra_compose

    class Group:  # the first payload's messages go out; a worker dies in the second's
        control, tp = SimpleNamespace(name="shm"), 2

        def __init__(self, *args):
            self.runs = 0

        def run(self, message, count, gap_s):
            self.runs += 1
            if message[0] == "noop":
                raise WorkerError(1, "process exited with code -9 (SIGKILL)")

        def collect_stats(self):
            return {"send": {"nbytes": [64], "ns": [1000]}, "recv": {1: {"nbytes": [64], "ns": [5000]}},
                    "silent_s": {}}

        describe = dict

        def close(self):
            pass

    monkeypatch.setattr(broadcast, "BroadcastGroup", Group)
    with hydra_compose() as compose:
        cfg = compose(["workload=broadcast", "tp=2", "progress=false", "workload.decode_batches=[1]",
                       "workload.prefill_batches=[]", "workload.raw_bytes=[64]", f"results_dir={tmp_path}"])
    assert broadcast.run_broadcast_job(cfg, None) == 1
    rows = pd.read_csv(tmp_path / "runs.csv")
    assert rows[["payload", "status"]].values.tolist() == [["decode-1", "ok"], ["raw-64B", "failed"]]
    assert "rank 1 failed" in rows.error.iloc[1]


@pytest.mark.parametrize("sweep", [(), ("-m",)])
def test_broadcast_refuses_ideal_which_has_no_transport_before_any_job(tmp_path, model_cache, sweep):
    """In a sweep too: shm's job never starts (the walkthrough saw it run 52 s, then exit 2)."""
    controls = "control=ideal,shm" if sweep else "control=ideal"
    res = harness(*sweep, "workload=broadcast", controls, "tp=2", f"results_dir={tmp_path}", cache=model_cache,
                  timeout=120)
    assert res.returncode == 2 and "ideal has no transport to time alone" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not list(tmp_path.glob("*.csv"))


def test_transformers_baseline_writes_a_row_beside_the_engine(tmp_path, model_cache):
    for engine in ("tp", "hf"):
        res = harness(f"engine={engine}", "workload=smoke", f"results_dir={tmp_path}", "progress=false",
                      cache=model_cache)
        assert res.returncode == 0, res.stderr[-2000:]
        assert "Loading weights" not in res.stdout + res.stderr  # transformers' bar, at progress=false (a trial)
    df = pd.read_csv(tmp_path / "runs.csv")
    assert list(df.engine) == ["tp", "hf"] and (df.status == "ok").all()
    assert df.output_tokens.nunique() == 1 and (df.output_tok_s > 0).all()


def test_latency_workload_runs_fixed_batches_many_times(tmp_path, model_cache):
    res = harness("workload=latency", "workload.num_seqs=8", "workload.iterations=2", "workload.output_len=16", "tp=2",
                  f"results_dir={tmp_path}", "progress=false", cache=model_cache)
    assert res.returncode == 0, res.stderr[-2000:]
    row = pd.read_csv(tmp_path / "runs.csv").iloc[0]
    assert row.num_requests == 16 and row.output_tokens == 16 * 16
    assert row.decode_steps == 2 * 15 and row.ctrl_calls == row.prefill_steps + row.decode_steps


def test_sweep_gives_one_row_per_job_and_repeat(tmp_path, model_cache):
    """-m control=shm,pipe tp=1,2 workload=smoke repeat=2: one row per job and repeat, 8 in all, and the
    summary table of the sweep at its end."""
    res = harness("-m", "control=shm,pipe", "tp=1,2", "workload=smoke", "repeat=2", f"results_dir={tmp_path}",
                  "progress=false", cache=model_cache)
    assert res.returncode == 0, res.stderr[-2000:]
    df = pd.read_csv(tmp_path / "runs.csv")
    assert len(df) == 8 and set(zip(df.control, df.tp)) == {("shm", 1), ("shm", 2), ("pipe", 1), ("pipe", 2)}
    assert sorted(df.repeat.unique()) == [0, 1] and (df.status == "ok").all()
    assert "== sweep: 4 jobs, 8 ok rows ==" in res.stdout


def test_checkpoint_cli_draws_a_preset_and_refuses_a_non_preset(model_cache, monkeypatch, capsys):
    """``python -m harness.checkpoint MODEL``, what the device scripts run before timing anything."""
    from harness.checkpoint import main

    monkeypatch.setenv("TPCP_CACHE", model_cache)
    assert main(["qwen3-tiny"]) == 0
    path = capsys.readouterr().out.strip().splitlines()[-1]
    assert os.path.isfile(os.path.join(path, "config.json")) and path.startswith(model_cache)
    with pytest.raises(SystemExit) as e:
        main(["auto"])  # a model option, not a preset
    assert e.value.code == 2 and "not a preset" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["qwen3-tiny", "--seed", "-1"])  # the harness refuses seed=-1: so does this
    assert e.value.code == 2 and "--seed must be >= 0, got -1" in capsys.readouterr().err


def test_a_drawn_preset_reads_from_a_cache_it_cannot_write_and_others_can_read_it(tmp_path, monkeypatch):
    """A new-user trial: a complete preset in a read-only cache failed without its .lock file ("cannot write the
    model cache"); presets were drawn 0700 with weights 0600, so no other user of a shared cache could read one.
    An empty TPCP_CACHE named the cache ''."""
    import stat

    import yaml

    from harness.checkpoint import cache_dir, materialize

    preset = yaml.safe_load(open(os.path.join(ROOT, "conf", "model", "qwen3-tiny.yaml")))["preset"]
    path = materialize("qwen3-tiny", preset, root=str(tmp_path))
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o777 & ~umask
    assert all(stat.S_IMODE(os.stat(os.path.join(path, f)).st_mode) == 0o666 & ~umask for f in os.listdir(path))
    os.remove(path + ".lock")
    os.chmod(tmp_path, 0o555)  # root writes anyway: the lock is what shows whether it tried
    try:
        assert materialize("qwen3-tiny", preset, root=str(tmp_path)) == path
        assert not os.path.exists(path + ".lock")
    finally:
        os.chmod(tmp_path, 0o755)
    monkeypatch.setenv("TPCP_CACHE", "")
    assert cache_dir() == os.path.expanduser("~/.cache/tp-controlplane-bench/models")
    # the new-user trial (session 31): '~/foo' drew the preset into ./~/foo, then the engine read ~/foo
    monkeypatch.setenv("TPCP_CACHE", "~/foo")
    assert cache_dir() == os.path.expanduser("~/foo")
    monkeypatch.setenv("TPCP_CACHE", "rel/cache")
    monkeypatch.chdir(tmp_path)
    assert cache_dir() == str(tmp_path / "rel" / "cache")


def test_a_preset_being_drawn_says_its_size(tmp_path, capsys):
    """The new-user trial (session 31): model.preset.hidden_size=100000 drew an 11 GB checkpoint for two minutes
    without a word of its size."""
    import math

    from helpers import TINY
    from safetensors import safe_open

    from harness.checkpoint import materialize

    path = materialize("tiny-size", TINY, root=str(tmp_path))
    with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:  # parameter_count leaves the norms out
        names = f.keys()  # a safe_open is not iterable
        params = sum(math.prod(f.get_slice(k).get_shape()) for k in names if "norm" not in k)
    said = re.search(r"building preset tiny-size once \(([\d.]+) M parameters, [\d.]+ GiB; transformers",
                     capsys.readouterr().out)
    assert said and float(said[1]) == round(params / 1e6, 1), params


def test_a_preset_build_killed_midway_is_cleaned_up_and_a_damaged_one_named(tmp_path):
    """Session-7 break test: SIGKILL while a preset was drawn left a hidden temporary directory in the cache
    for good; a preset damaged later failed every run with no hint that deleting it is the cure."""
    import yaml

    from harness.checkpoint import materialize

    preset = yaml.safe_load(open(os.path.join(ROOT, "conf", "model", "qwen3-tiny.yaml")))["preset"]
    path = materialize("qwen3-tiny", preset, root=str(tmp_path))
    key = os.path.basename(path).rsplit("-", 1)[1]
    stale = tmp_path / f".qwen3-tiny-{key}-killed"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    os.rename(path, str(tmp_path / "moved"))  # not built any more: the next call draws it again
    assert materialize("qwen3-tiny", preset, root=str(tmp_path)) == path and not stale.exists()
    with open(os.path.join(path, "model.safetensors"), "r+b") as f:
        f.truncate(1000)
    res = harness("model=qwen3-tiny", "tp=1", "workload=smoke", f"results_dir={tmp_path}/r", cache=str(tmp_path))
    assert res.returncode == 2 and f"a damaged preset: delete {path}" in res.stderr, res.stderr[-2000:]
    os.remove(os.path.join(path, "model.safetensors"))  # a new-user trial: named, with no cure, for engine=hf too
    for engine in ("tp", "hf"):
        res = harness("model=qwen3-tiny", f"engine={engine}", "workload=smoke", f"results_dir={tmp_path}/r",
                      cache=str(tmp_path))
        assert res.returncode == 2 and f"a damaged preset: delete {path}" in res.stderr, res.stderr[-2000:]


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("script", ["bench_gemv.py", "bench_decode_kernel.py", "profile_steps.py",
                                    "all_reduce_sizes.py"])
def test_gpu_only_scripts_refuse_a_cpu_machine_in_one_line(script):
    """The device scripts, run where there is no GPU: one line naming the script, exit 2, no traceback."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", script)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "Warning" not in ln and "warn(" not in ln]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {script} measures CUDA kernels"), lines


def test_a_sweep_asking_more_gpus_than_visible_is_refused_before_its_first_job(monkeypatch):
    """Call 28 (one H200): ``-m tp=1,2 device=cuda`` ran the tp=1 job, then stopped at tp=2 (exit 2)."""
    import torch

    from engine.config import placement_problem
    from harness.preflight import check_command
    from runtime.launch import Launch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert check_command(["-m", "tp=1,2", "device=cuda", "workload=smoke"])[0] == (
        "2 ranks on this host need as many GPUs; 1 visible")
    assert placement_problem("auto", 2, None) == "2 ranks on this host need as many GPUs; 1 visible"
    assert placement_problem("cpu", 2, None) is None and placement_problem("cuda", 1, None) is None
    assert placement_problem("cuda", 2, None, count_gpus=False) is None  # a broadcast job builds no engine
    two_hosts = Launch("torchrun", 0, 2, 0, 1)  # under torchrun each host checks its own ranks
    assert placement_problem("cuda", 2, two_hosts) is None
    one_host = Launch("torchrun", 0, 2, 0, 2)  # torchrun --nproc-per-node=2 on one GPU: once refused in the job
    assert placement_problem("cuda", 2, one_host) == "2 ranks on this host need as many GPUs; 1 visible"
    assert placement_problem("cuda", 4, one_host).startswith("tp=4 but torchrun started WORLD_SIZE=2 ranks")


@pytest.mark.parametrize("argv, message", [
    (["control=pipe", "tp=2"], "control=pipe cannot reach ranks started by torchrun (scope: spawn); planes that can: "
                               "gloo, hybrid, ring, zmq"),
    (["control=ideal", "tp=2"], "control=ideal cannot reach ranks started by torchrun (scope: spawn); planes that "
                                "can: gloo, hybrid, ring, zmq; or control=ideal control.options.inner=gloo|hybrid|"
                                "ring|zmq"),  # its default inner plane is pipe
    (["-m", "control=ring", "tp=2,1"], "tp=1 but torchrun started WORLD_SIZE=2 ranks: tp must equal nnodes x "
                                       "nproc-per-node"),
    (["engine=hf"], "engine=hf runs on one device: do not launch it with torchrun"),
    (["control=ring", "tp=2"], None),
    (["control=ideal", "control.options.inner=gloo", "tp=2"], None),
])
def test_what_torchrun_cannot_run_is_refused_before_the_first_job(argv, message, monkeypatch):
    """Session 22's new-user trial: ``torchrun --nproc-per-node=2 -m harness control=pipe tp=2`` printed its model
    pick, then was refused inside the job, leaving an empty results_dir and an outputs/ folder."""
    from harness.preflight import check_command

    for var, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(var, value)
    assert check_command([*argv, "device=cpu"])[0] == message
    if argv == ["control=pipe", "tp=2"]:  # two nodes of one rank each: what the engine said once it probed them
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
        assert check_command([*argv, "device=cpu"])[0] == ("control=pipe cannot reach ranks on 2 nodes (scope: "
                                                           "spawn); planes that can: gloo, hybrid, zmq")


@pytest.mark.parametrize("env, message", [
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"},
     "MASTER_PORT not set where RANK, WORLD_SIZE or LOCAL_RANK is: start the ranks with torchrun"),
    ({"RANK": "x", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
     "RANK='x': torchrun's variables are integers >= 0"),
    ({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, None),  # a cluster's defaults alone: spawned
])
def test_torchruns_variables_half_set_are_refused_not_ignored(env, message, monkeypatch):
    """Session 35's torchrun trial: MASTER_PORT missing ran the process as a rank 0 of its own (spawned workers, an ok
    row); under a launcher that forgot one variable every process would run alone. RANK=x: a ValueError."""
    from harness.preflight import check_command

    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    problem = check_command(["control=hybrid", "tp=2", "device=cpu", "workload=smoke"])[0]
    assert (problem or "").startswith(message or "") and (problem is None) == (message is None), problem


def test_a_rank_whose_store_never_comes_up_gives_up_once_its_timeout_is_over(monkeypatch):
    """Session 53's trial: rank 0 killed at start-up under torchrun, a rank on another node waited about twice
    llm.startup_timeout_s (torch's client tries twice), printing a C++ trace for each try; now one timeout, one line."""
    import socket

    from runtime.launch import Launch, torchrun_store

    with socket.socket() as bound:  # bound, not listening: a connection is refused, as where the store has gone
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        for var, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "RANK": 1, "WORLD_SIZE": 2}.items():
            monkeypatch.setenv(var, str(value))
        with pytest.raises(TimeoutError, match=f"store at 127.0.0.1:{port} took no connection for 1.5 s"):
            torchrun_store(Launch("torchrun", rank=1, world_size=2, master_addr="127.0.0.1"), 1.5)


def test_a_results_dir_under_home_holds_hydras_output_too(tmp_path):
    """A new user's trial: results_dir='~/x' put the rows under $HOME/x and Hydra's output in ./~/x/hydra."""
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": ROOT}
    res = subprocess.run([sys.executable, "-m", "harness", "--cfg", "all", "--resolve", "results_dir='~/x'"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    dirs = [line.split(": ", 1)[1] for line in res.stdout.splitlines() if line.strip().startswith("dir: ")]
    assert len(dirs) == 2 and all(d.startswith(f"{tmp_path}/x/hydra/") for d in dirs), dirs


def test_relative_paths_are_the_users_even_under_hydra_chdir(tmp_path, model_cache, tiny_untied):
    """With hydra.job.chdir=true a relative results_dir landed inside Hydra's output directory (issue 29). The
    run file recorded the relative model.path and the unused preset of model=auto (session 16's trial)."""
    os.symlink(tiny_untied, tmp_path / "ckpt")
    env = {**os.environ, "TPCP_CACHE": model_cache, "PYTHONPATH": ROOT}
    res = subprocess.run([sys.executable, "-m", "harness", "workload=smoke", "results_dir=rel", "progress=false",
                          "model.path=ckpt", "hydra.job.chdir=true"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    csv = tmp_path / "rel" / "runs.csv"
    assert csv.is_file() and f"row appended to {csv}" in res.stdout
    run_id = pd.read_csv(csv).run_id.iloc[0]
    run = json.loads((tmp_path / "rel" / "runs" / f"{run_id}.json").read_text())
    assert run["config"]["model"] == {"name": "ckpt", "path": str(tmp_path / "ckpt")}
    assert (run["config"]["device"], run["config"]["dtype"]) == ("cpu", "float32")  # auto, resolved as it ran


def test_a_deleted_llm_key_falls_back_to_the_engines_default_and_says_so(tmp_path, model_cache):
    res = harness("~llm.max_num_seqs", "~llm.async_scheduling", "workload=smoke", f"results_dir={tmp_path}",
                  "progress=false", cache=model_cache)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "note: llm.max_num_seqs was deleted (~): the engine's default, 512, applies" in res.stderr
    assert "note: llm.async_scheduling was deleted (~): the engine's default, True, applies" in res.stderr


@pytest.mark.parametrize("argv, message", [
    # session 11's break test of the structured configs: each ended in a traceback (exit 1) or ran
    (["-m", "tp=interval(1,2)"], "BasicSweeper does not support sweep type : INTERVAL_SWEEP"),
    (["+control.options.foo=1"], "control=shm has no option 'foo' (its options: segment_bytes)"),
    (["-m", "control=ideal,shm", "++control.options.segment_bytes=1048576"], "control=ideal has no option"),
    (["~tp"], "~tp: every key of the configuration stays"),
    (["~llm"], "~llm: every key of the configuration stays"),
    (["tp=${oc.env:TPCP_NO_SUCH_VARIABLE}"], "InterpolationResolutionError"),
    (["--foo"], "unknown option '--foo'"),
    (["--config-name", "nope"], "--config-name: the harness composes its own conf/"),  # Hydra: 6 lines, exit 1
    (["-cp=/nonexistent"], "-cp: the harness composes its own conf/"),
    (["++foo=1"], "unknown config key 'foo': nothing reads it"),
    (["+llm.foo=1"], "unknown config key 'llm.foo': nothing reads it"),
    (["results_dir=null"], "results_dir cannot be null"),
    (["workload=broadcast", "workload.decode_batches=5"], "workload.decode_batches must be a list, got '5'"),
    (["workload.foo=1"], "unknown config key 'workload.foo' (the keys"),  # no hint from the prefix alone
    (["model=qwen3-tiny", "model.preset.num_attention_heads=3"], "must be a multiple of num_key_value_heads=4"),
    (["hydra.run.dir="], "hydra.run.dir is empty"),  # Hydra wrote .hydra/ into the current directory
    (["workload.cpu.num_seqs=0"], "workload.cpu.num_seqs must be an integer >= 1, got 0"),
    ([f"model.path={__file__}"], "is a file, not a checkpoint directory"),
    (["control=[shm,ring]"], "control takes one option; to run several, sweep them: -m control=shm,ring"),
    (["workload=[smoke,bench]"], "workload takes one option"),  # Hydra merged both and ran bench
    (["hydra.run.dir=/proc/tpcp-no-such-dir"], "hydra.run.dir=/proc/tpcp-no-such-dir: cannot create"),
    (["-m", "hydra.launcher=foo", "tp=1,2"], "chosen with hydra/launcher=<name>"),
    (["--cfg", "bogus"], "--cfg takes one of job, hydra, all"),
    (["--cfg"], "--cfg takes one of job, hydra, all"),
    (["--cfg=bogus"], "--cfg takes one of job, hydra, all"),  # the = form: argparse's 8-line usage, exit 2
    (["-c=bogus"], "-c takes one of job, hydra, all"),
    (["--info=bogus"], "--info takes one of all, config, defaults"),
    (["-m", "--info"], "Hydra takes one of --run, --multirun (-m), --cfg and --info"),
    # Hydra resolves its node alone, where ${results_dir} is missing: an InterpolationKeyError traceback
    (["--cfg", "hydra", "--resolve"], "--cfg hydra --resolve: the run dirs name results_dir"),
    (["--resolve", "-c=hydra"], "-c hydra --resolve: the run dirs name results_dir"),
    (["-m", "dtype=float32,int3"], "dtype 'int3' is not supported on "),  # before job 0, not at job 1
    (["cpu_threads=-1"], "cpu_threads must be 0 (cores / tp) or 1-1024, got -1"),
    # session 13's new-user trial: each was refused only inside its job, after the sweep's earlier jobs had run
    (["-m", "results_dir=/tmp,/proc/tpcp-forbidden"], "cannot write results to /proc/tpcp-forbidden"),
    ([f"results_dir={ROOT}", "results_file=tests"], "results_file must end in .csv (harness.analyze DIR reads"),
    (["engine=hf", "tp=2"], "engine=hf runs on one device: use tp=1"),
    (["=2"], "'=2': an override is key=value; the key before '=' is missing"),  # Hydra: "... Got int"
    (["=shm"], "'=shm': an override is key=value"),  # Hydra: "Could not override ''"
    (["tag=${nope}"], "Interpolation key 'nope' not found (in tag)"),
    # session 14: refused only inside its job (7.9 s, an outputs/ directory left), after a sweep's earlier jobs
    (["-m", "llm.max_model_len=4096,16"], "the limit is 16 (llm.max_model_len=16, the model's max_position_emb"),
    # the command's max_input_len wins over bench's CPU scale-down (128), as in the job
    (["device=cpu", "workload.max_input_len=1024", "llm.max_model_len=1000"], "asks for sequences of up to 1088"),
    # session 15's new-user trial: refused inside its job (4 s, an outputs/ directory left)
    (["workload=broadcast", "tp=1"], "workload=broadcast measures the control plane between ranks: needs engine=tp"),
    (["-m", "workload=broadcast", "tp=2,1"], "needs engine=tp and tp >= 2"),  # before job 0
    # session 21: refused only inside its job, after a sweep's earlier jobs had run
    (["-m", "llm.max_num_batched_tokens=16384,100", "llm.max_model_len=4096"],
     "llm.max_num_batched_tokens=100 must be >= max_model_len=4096"),
    # session 21's new-user trial: a traceback (exit 1), or a line naming the wrong key
    (["control={a:1}"], "control takes the name of one option, got '{a:1}' (available: gloo, hybrid, ideal"),
    (["model=3"], "model takes the name of one option, got '3' (available: auto, "),
    (["workload=null"], "workload takes the name of one option, got 'null'"),
    (["llm={a:1}"], "unknown config key 'llm.a' (the keys"),
    (["workload=serve", "workload.slo={a:1}"], "unknown config key 'workload.slo.a' (the keys"),
    (["llm=3"], "llm holds the engine's settings: set one with llm.<key>=value"),
    (["llm=null"], "llm holds the engine's settings"),
    (["device=cpu", "workload=serve", "workload.request_rate=0.0001"], "=0.0001 with 24 prompts: the arrivals would"),
    # a helper's find (session 21): passed, then an IndexError (exit 1) once the group had started
    (["workload=broadcast", "tp=2", "workload.warmup=0"], "workload.warmup must be an integer >= 1, got 0"),
    # the new-user trial (session 31): a MemoryError (exit 1, a failed row) once the workers had started
    (["workload=broadcast", "tp=2", "workload.raw_bytes=[99999999999]"],
     "workload.raw_bytes: 99999999999 is more than 1024 MiB, the largest payload sent"),
    (["workload=broadcast", "tp=2", "workload.decode_batches=[100000]", "workload.decode_context=1000"],
     "workload.decode_batches: 100000 x decode_context=1000 tokens is more than 50,000,000 to draw"),
    (["workload=broadcast", "tp=2", "workload.prefill_batches=[[1000,100000]]"],
     "workload.prefill_batches: 1000 x 100000 tokens is more than 50,000,000 to draw"),
    (["results_file='x\ny.csv'"], "results_file must be a file name of printable characters, got 'x\\ny.csv'"),
    # session 28's break test: the run went ahead, then its row went to stderr (ENAMETOOLONG), exit 1
    ([f"results_file={'d' * 300}.csv"], "results_file is 304 bytes long: at most 230"),
    (["results_file=.csv"], "results_file must not start with '.' (harness.analyze DIR would not see it)"),
    (["tag='a\nb'"], "tag must be one line of printable characters, got 'a\\nb'"),
    # session 22's new-user trial: refused only inside its job, after a sweep's earlier jobs had run
    (["-m", "control=shm,ideal", "tp=2", "workload=serve", "workload.request_rate=0.01", "workload.num_prompts=3"],
     "control=ideal: the trace has a 178 s wait for an arrival"),
    (["-m", "llm.num_kvcache_blocks=8,1", "workload=smoke", "llm.kvcache_block_size=16"],
     "workload smoke asks for sequences of up to 40 tokens: 3 KV blocks of llm.kvcache_block_size=16, more than "
     "llm.num_kvcache_blocks=1"),  # a failed row (exit 1) once the engine had started
    # session 34's Hydra trial: each ran silently, ran with the wrong value, or ended in a traceback (exit 1)
    (["+model.pth=/nonexistent"], "unknown config key 'model.pth': nothing reads it"),
    (["+control.foo=1"], "unknown config key 'control.foo'"),
    (["+workload.cpu.foo=1"], "unknown config key 'workload.cpu.foo'"),
    (["control.name=ring"], "control.name comes with the option: choose one with control=<name> (available: gloo"),
    (["model.path=[a,b]"], "model.path is a checkpoint directory, got ['a', 'b']"),
    (["~llm.max_num_seqs=999"], "~llm.max_num_seqs=999: llm.max_num_seqs is 512 here, not 999"),
    (["--resolve"], "--resolve goes with --cfg"),
    (["--help", "-m", "tp=1,2"], "--help shows one job's configuration"),
    (["-c", "job", "-p", "nope"], "--package nope: no such key in the configuration"),
    (["-m", "tp=range(1,1)"], "tp=range(1,1) selects nothing: the sweep has no value"),  # was conf/tp: no such file
    (["hydra.run.dir=${oops}"], "hydra.run.dir: InterpolationKeyError: Interpolation key 'oops' not found"),
    (["-m", "hydra.sweep.subdir=${oops}"], "hydra.sweep.subdir: InterpolationKeyError"),
    (["-m", "hydra.sweep.subdir=/proc/x"], "hydra.sweep.subdir=/proc/x: cannot create the directory"),
    (["hydra.run.dir=/proc/${tp}"], "hydra.run.dir=/proc/1: cannot create the directory"),
    (["-m", "hydra.sweep.dir=/proc/x"], "hydra.sweep.dir=/proc/x: cannot create the directory"),
    (["hydra.run.dir="], "hydra.run.dir is empty: give a directory"),
    (["-m", "hydra.sweep.dir=null"], "hydra.sweep.dir is empty: give a directory"),
    (["--experimental-rerun", "x.pickle"], "--experimental-rerun: the harness does not save the pickled jobs"),
    (["llm.max_num_seqs=null"], "llm.max_num_seqs cannot be null"),  # was "must be an integer, got None"
    (["hydra.mode=BOGUS"], "hydra.mode: Invalid value 'BOGUS', expected one of [RUN, MULTIRUN]"),
])
def test_the_up_front_checks_refuse_in_one_line(argv, message):
    from harness.preflight import check_command

    problem, _ = check_command(argv)
    assert problem is not None and message in problem and "\n" not in problem, problem


@pytest.mark.parametrize("out", ["| head -1", "> /dev/full"])
def test_a_reader_of_the_printout_that_leaves_early_changes_nothing(out, tmp_path, model_cache):
    """The new-user trials (session 31): `python -m harness ... | head -1` wrote the run twice, an ok row and a failed
    one ("BrokenPipeError") under another run_id, after a page of logging tracebacks; `> /dev/full` failed the run."""
    cmd = (f"{sys.executable} -m harness control=shm tp=2 workload=smoke results_dir={tmp_path} progress=false "
           f"{out}; exit ${{PIPESTATUS[0]}}")
    res = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env={**os.environ, "TPCP_CACHE": model_cache},
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "Traceback" not in res.stderr and "Logging error" not in res.stderr, res.stderr
    assert list(pd.read_csv(tmp_path / "runs.csv").status) == ["ok"]


@pytest.mark.parametrize("argv, message", [
    (["nosuch"], "error: 'nosuch' is not a preset in conf/model/ (see python -m harness.checkpoint --help)"),
    ([], "error: the following arguments are required: model (see python -m harness.checkpoint --help)"),
    (["qwen3-0.6b", "--seed", "-1"], "error: --seed must be >= 0, got -1 (see python -m harness.checkpoint --help)"),
])
def test_the_checkpoint_command_refuses_in_one_line(argv, message):
    """The new-user trial (session 32): argparse's usage line came first, two lines in all."""
    res = subprocess.run([sys.executable, "-m", "harness.checkpoint", *argv], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2 and res.stderr == message + "\n" and not res.stdout, res.stderr


@pytest.mark.parametrize("argv", [["-m", "harness", "tp=abc"], ["-m", "harness.analyze", "--bogus"]])
def test_bad_input_exits_2_when_stderr_cannot_be_written(argv):
    """Session 31 noticed: with `2> /dev/full` the one line failed and bad input exited 1, after a traceback."""
    with open("/dev/full", "w") as full:
        res = subprocess.run([sys.executable, *argv], cwd=ROOT, stdout=subprocess.PIPE, stderr=full, timeout=120)
    assert res.returncode == 2 and not res.stdout


def test_a_full_results_dir_is_refused_up_front(tmp_path, monkeypatch):
    """Session 28's break test: a full disk under results_dir ended in Hydra's traceback (saving its config), with
    no row and empty files left."""
    import shutil

    from harness.preflight import check_command

    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10 << 20, 10 << 20, 4096))
    problem, _ = check_command([f"results_dir={tmp_path}"])
    assert problem == f"cannot write results to {tmp_path}: its file system is full (4096 bytes free)"


def test_a_results_file_that_is_a_directory_is_refused_up_front(tmp_path):
    """Session 13's new-user trial: refused only once the row was due (exit 1), after the sweep's earlier jobs."""
    from harness.preflight import check_command

    (tmp_path / "runs.csv").mkdir()
    problem, _ = check_command(["-m", f"results_dir={tmp_path}", "results_file=ok.csv,runs.csv"])
    assert problem is not None and problem.startswith("results_file=runs.csv: "), problem


def test_a_results_file_that_cannot_be_appended_to_is_refused_up_front(tmp_path, monkeypatch):
    """The new-user trial (session 36): an immutable (or, for a user, read-only) runs.csv was found only once the
    row was due, after the whole job: exit 1 and the row in runs.unwritten-*.csv."""
    import builtins

    from harness.preflight import check_command

    (tmp_path / "runs.csv").write_text("kept\n")
    real = builtins.open

    def read_only(path, mode="r", *args, **kwargs):
        if str(path) == str(tmp_path / "runs.csv") and mode != "r":
            raise PermissionError(1, "Operation not permitted")
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", read_only)
    problem = check_command([f"results_dir={tmp_path}", "workload=smoke"])[0]
    monkeypatch.undo()
    assert problem == f"cannot append rows to {tmp_path / 'runs.csv'}: Operation not permitted"
    assert (tmp_path / "runs.csv").read_text() == "kept\n"


def test_a_results_file_that_is_no_regular_file_is_refused(tmp_path):
    """Session 29's break test: a FIFO runs.csv hung the run at its row for good (open() blocks); only SIGKILL
    ended it, leaving its worker and segments."""
    from harness.preflight import check_command

    os.mkfifo(tmp_path / "runs.csv")
    problem = check_command([f"results_dir={tmp_path}", "workload=smoke"])[0]
    assert problem == f"results_file=runs.csv: {tmp_path / 'runs.csv'} is not a regular file"


@pytest.mark.parametrize("content", [b"a,b\n1,2\n", b"\n", b"\x00\x01\x02", b"\xef\xbb\xbfcontrol,tp\nshm,2\n",
                                     b"a,b\rc\n"])  # a bare CR: csv.Error, once printed raw ("error: Error: ...")
def test_a_results_file_that_is_no_results_csv_is_refused(tmp_path, content):
    """Session 56's new-user trial: another tool's CSV (or a binary file) as results_file ran the whole job, and its
    row went to a new runs.schema<N>-*.csv with a note that the file had "another schema's header"."""
    from harness.preflight import check_command

    (tmp_path / "runs.csv").write_bytes(content)
    problem = check_command([f"results_dir={tmp_path}", "workload=smoke"])[0]
    assert problem == (f"results_file=runs.csv: {tmp_path / 'runs.csv'} is not a results CSV (its first line names "
                       "no schema_version column); give another results_file, or move that file")
    assert (tmp_path / "runs.csv").read_bytes() == content


def test_a_results_file_linked_to_nothing_is_refused_before_the_job(tmp_path):
    """Session 57's new-user trial: a dangling runs.csv link ran the whole job, then exit 1 (the row went aside)."""
    from harness.preflight import check_command

    (tmp_path / "runs.csv").symlink_to(tmp_path / "gone" / "x.csv")
    problem = check_command([f"results_dir={tmp_path}", "workload=smoke"])[0]
    assert problem == (f"results_file=runs.csv: {tmp_path / 'runs.csv'} is a link to {tmp_path / 'gone' / 'x.csv'}, "
                       "which does not exist")


@pytest.mark.parametrize("content", [b"", b"schema_version,control\n1,shm\n", b"\xef\xbb\xbfschema_version,x\r\n"])
def test_an_empty_file_or_any_schemas_results_csv_is_taken(tmp_path, content):
    """An empty file gets the header; an older schema's CSV (its rows go to a schema file beside it), a BOM, CRLF."""
    from harness.preflight import check_command

    (tmp_path / "runs.csv").write_bytes(content)
    assert check_command([f"results_dir={tmp_path}", "workload=smoke"])[0] is None


def test_a_glob_sweeps_the_options_it_matches_and_help_lists_only_groups_one_can_pick():
    from harness import preflight

    assert preflight.check_command(["-m", "control=glob(*,exclude=[ideal,gloo])", "tp=2"])[0] is None
    assert preflight.JOB_COUNT == 6
    out = subprocess.run([sys.executable, "-m", "harness", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120).stdout
    assert out.startswith("python -m harness [-m] [key=value ...]: runs a workload")  # was "__main__ is powered by"
    groups = out[out.index("== Configuration groups =="):out.index("== Config ==")]
    assert [line.split(":")[0] for line in groups.splitlines()[2:] if line] == ["control", "model", "workload"]


@pytest.mark.parametrize("argv", [["--cfg", "job"], ["--cfg", "job", "tp=2"], ["--info", "config"], ["--cfg=job"],
                                  ["--info=defaults", "tp=2"], ["model.path=null"], ["tag=null"],
                                  # session 34's Hydra trial: refused, or a traceback (a flag's value read as an
                                  # override; ${hydra:...} without Hydra's config; a bool set by interpolation)
                                  ["-c", "job", "-p", "workload", "workload.num_seqs=3"],
                                  ["-c", "job", "-p", "control.options"], ["tp=2", "--cfg", "job", "-p", "llm"],
                                  ["--shell-completion", "install=bash"],
                                  ["results_dir=${hydra:runtime.cwd}/x"], ["tag=${hydra:runtime.choices.control}"],
                                  ["progress=${reuse_engine}"], ["-m", "hydra.sweep.subdir=${hydra.job.num}_x"]])
def test_hydras_flags_and_null_defaults_pass_the_up_front_checks(argv):
    from hydra.core.hydra_config import HydraConfig

    from harness.preflight import check_command

    assert check_command(argv)[0] is None
    assert not HydraConfig.initialized()  # the checks' compositions leave Hydra's config unset for the job


def test_a_deletion_after_a_setting_wins_and_one_before_it_does_not(capsys):
    """Session 34's Hydra trial: llm.max_num_seqs=2 ~llm.max_num_seqs said the default applied, and the run used 2."""
    from harness.preflight import check_command

    problem, argv = check_command(["llm.max_num_seqs=2", "~llm.max_num_seqs", "tp=2"])
    assert problem is None and argv == ["tp=2"]
    assert "llm.max_num_seqs was deleted (~): the engine's default, 512, applies" in capsys.readouterr().err
    problem, argv = check_command(["~llm.max_num_seqs", "llm.max_num_seqs=3"])
    assert problem is None and argv == ["llm.max_num_seqs=3"] and "deleted" not in capsys.readouterr().err


def test_llm_settings_under_engine_hf_pass_with_a_note(capsys):
    from harness.preflight import check_command

    assert check_command(["-m", "engine=hf,tp", "llm.max_num_seqs=4"])[0] is None
    assert capsys.readouterr().err.count("nothing reads llm.max_num_seqs") == 1
    # a new-user trial: engine=hf control=shm ran with an empty control column and no word
    assert check_command(["engine=hf", "control=shm", "control.options.segment_bytes=65536"])[0] is None
    assert "no control plane: nothing reads control, control.options.segment_bytes" in capsys.readouterr().err
    assert check_command(["workload=smoke", "++workload.cpu.num_seqs=2"])[0] is None
    assert "workload=smoke does not scale on CPU (scale_on_cpu=false): nothing reads" in capsys.readouterr().err
    # session 13's new-user trial: the draw stopped at the vocabulary's last id, silently
    assert check_command(["model=qwen3-tiny", "workload=smoke", "workload.max_token_id=99999999"])[0] is None
    assert ("note: workload.max_token_id=99999999 is past the vocabulary of model=qwen3-tiny (16384 ids): token ids "
            "go up to 16383") in capsys.readouterr().err
    assert check_command(["model=qwen3-tiny", "workload=smoke", "workload.max_token_id=100"])[0] is None
    assert "max_token_id" not in capsys.readouterr().err
    # session 53's new-user trial: the engine capped it at the model's positions, silently (the row says 99999999)
    assert check_command(["model=qwen3-tiny", "workload=smoke", "llm.max_model_len=99999999"])[0] is None
    assert ("note: llm.max_model_len=99999999 is past the 4096 positions of model=qwen3-tiny: the engine uses 4096"
            in capsys.readouterr().err)
    assert check_command(["model=qwen3-tiny", "workload=smoke", "llm.max_model_len=4096"])[0] is None
    assert "max_model_len" not in capsys.readouterr().err


@pytest.mark.parametrize("argv, note", [
    # a new-user trial: save_requests=true on workload=smoke wrote nothing and said nothing
    (["workload=smoke", "save_requests=true"], "note: workload=smoke has no per-request file (a serve workload has "
                                               "one, e.g. workload=serve): nothing reads save_requests"),
    (["-m", "workload=latency,serve", "save_requests=true"], "note: workload=latency has no per-request file"),
    (["engine=hf", "step_log=true"], "note: engine=hf runs no engine steps to log: nothing reads step_log"),
    (["workload=broadcast", "tp=2", "step_log=true"], "note: workload=broadcast runs no engine steps to log"),
    # session 51's new-user trial: dtype=nope on the broadcast workload passed without a word
    (["workload=broadcast", "tp=2", "dtype=nope", "llm.max_num_seqs=4", "llm.timeout_s=30"],
     "note: workload=broadcast times the control plane with no model: nothing reads dtype, llm.max_num_seqs"),
    (["workload=serve", "save_requests=true", "step_log=true"], None),
    (["workload=smoke", "save_requests=false"], None),
    # session 22's new-user trial: accepted silently, and its rows did not pool with others (overrides)
    (["workload=smoke", "profile_steps=5"], "note: profile=none traces nothing (profile=torch does): nothing reads "
                                            "profile_steps"),
    (["engine=hf", "profile=torch", "profile_steps=1-3"], "note: engine=hf writes no trace: nothing reads "
                                                          "profile_steps"),
    (["workload=smoke", "profile=torch", "profile_steps=1-3"], None),
    # session 18's new-user trial: tp=2 tp=4 ran at tp=4 without a word
    (["workload=smoke", "tp=2", "tp=4"], "note: tp is given 2 times: the last, tp=4, applies"),
    # session 32's new-user trial: the sweep ran smoke alone, without a word
    (["-m", "workload=serve,smoke", "workload=smoke"], "note: workload is given 2 times: the last, workload=smoke, "
                                                       "applies"),
    # session 29's new-user trial: recorded without a word, and its rows fell apart from rate=inf's others
    (["workload=serve", "workload.request_rate=inf", "workload.burstiness=0.5"],
     "note: workload.burstiness=0.5 shapes the gaps between arrivals; at request_rate=inf there are none"),
    (["-m", "workload=serve", "workload.request_rate=2,inf", "workload.burstiness=0.5"], "at request_rate=inf there"),
    (["workload=serve", "workload.request_rate=2", "workload.burstiness=0.5"], None),
    # session 29's new-user trial: 4 engine starts where 2 would do, and nothing said why
    (["-m", "workload=smoke,latency", "control=ideal,shm", "tp=2"], "note: this order starts an engine 4 times where 2 "
     "would do (Hydra varies the last override fastest): python -m harness -m control=ideal,shm tp=2 "
     "workload=smoke,latency"),
    (["-m", "control=ideal,shm", "workload=smoke,latency", "tp=2"], None),
    (["-m", "llm.async_scheduling=true,false", "control=ideal,shm"], "starts an engine 4 times where 2 would do"),
    (["-m", "workload=smoke,latency", "control=ideal,shm", "reuse_engine=false"], None),
    (["-m", "workload=smoke,latency", "control=ideal,shm", "engine=hf"], "no control plane: nothing reads control"),
    (["-m", "model.preset.vocab_size=5000", "workload=smoke,latency"], None),  # model=auto: no preset to compose
])
def test_a_file_switch_on_a_job_that_writes_no_such_file_passes_with_a_note(argv, note, capsys):
    from harness.preflight import check_command

    assert check_command(argv)[0] is None
    err = capsys.readouterr().err
    assert (note in err and err.count("\n") == 1) if note else err == "", err


def test_a_model_larger_than_the_memory_is_refused_before_it_is_built():
    """model=qwen3-8b on a 23 GB CPU machine: the OOM killer ended the build with no message."""
    from harness.model_checks import memory_problem, parameter_count

    assert parameter_count({"hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16,
                            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072,
                            "vocab_size": 151936, "tie_word_embeddings": True}) == 595_984_384  # Qwen3-0.6B
    huge = {"hidden_size": 2**16, "num_hidden_layers": 2**10, "num_attention_heads": 64, "num_key_value_heads": 8,
            "intermediate_size": 2**18, "vocab_size": 1000}
    problem = memory_problem(huge, "model=huge", "cpu", building=True)
    assert problem.startswith("model=huge has") and "more than this machine's" in problem
    assert memory_problem({**huge, "num_hidden_layers": 1, "intermediate_size": 64, "hidden_size": 64},
                          "model=small", "cpu", building=True) is None


def test_a_refused_command_leaves_no_directory_behind(tmp_path, monkeypatch):
    """Session 13's new-user trial: hydra.job.chdir=true made a directory named True (taken for a hydra.*dir),
    and a refused command kept the hydra.run.dir and results_dir it had created to check them."""
    from harness.preflight import check_command

    monkeypatch.chdir(tmp_path)
    for argv in (["hydra.job.chdir=true", "tp=9"], ["hydra.run.dir=made/here", "tp=9"],
                 ["results_dir=new/rows", "tp=9"], ["-m", "hydra.sweep.dir=swept/here", "tp=9"]):
        problem, _ = check_command(argv)
        assert problem is not None and "tp=9" in problem, problem
    assert os.listdir(tmp_path) == []
