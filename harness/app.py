"""One harness job: build the engine (or join one, on ranks other than 0 under torchrun; ``engine=hf``: load
transformers' model), run the workload ``repeat`` times, append one CSV row per repeat."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace
from typing import TextIO

import torch
from omegaconf import DictConfig
from tqdm.auto import tqdm

from engine import LLM, ConfigError, EngineConfig, SamplingParams, WorkerError, serve_worker
from engine.config import resolve_device, torch_dtype
from runtime.launch import Launch
from runtime.worker import serve

from . import engine_cache, job_setup, metrics
from .broadcast import broadcast_worker, run_broadcast_job
from .host_cpu import OtherCpu
from .job_checks import cli_message
from .job_setup import base_row, check_results_dir, engine_settings, failed, model_label, prepare, resolve_model
from .metrics import NvmlSampler
from .report import SWEEP_ROWS, floor_lines, print_summary, show_progress, stall_error, trace_lines
from .results_csv import new_run_id, open_run_file
from .signals import as_interrupt, from_torchrun_agent, worker_stopped
from .step_log import write_step_log
from .workloads import Workload, serve_columns, serve_pass

WARM_PROMPTS = 32  # bench: ~18k prompt tokens, more than one prefill of max_num_batched_tokens

def measured_pass(llm: LLM, work: Workload, progress: bool, plan: list[tuple[int, bool]] | None = None,
                  log: TextIO | None = None) -> tuple[dict, list]:
    """One pass from a reset engine: (request metric columns, step records); ``plan``, ``log``: ``serve_pass``'s."""
    if work.arrivals is not None:
        records, steps, start, last, overhead_us = serve_pass(llm, work, progress, plan, log)
        return {**metrics.serve_metrics(records, work, start, last), "serve_loop_us_per_step": overhead_us}, steps
    llm.reset()
    outputs, steps = [], []
    iterations = tqdm(range(work.iterations), desc=f"{work.name} iterations", unit="it", dynamic_ncols=True,
                      disable=not progress or work.iterations == 1)  # one iteration: generate's own bar
    start = time.perf_counter()
    for _ in iterations:
        outputs += llm.generate(work.prompts, work.params, use_tqdm=progress and work.iterations == 1)
        steps += llm.steps
    end = time.perf_counter()
    row = metrics.request_metrics(outputs, work.prompt_lens * work.iterations, start, end)
    return {**row, "preemptions": sum(o["num_preemptions"] for o in outputs)}, steps


def timed_run(llm: LLM, work: Workload, sampler: NvmlSampler, progress: bool, step_log: str | None = None,
              requests: str | None = None, trace: str | None = None) -> tuple[dict, list[str], dict[int, float]]:
    """One timed pass from a reset engine (``control=ideal``: replaying an untimed recording pass): (metric columns,
    traces, {rank: longest silence (s)} of stalled ranks); ``step_log``, ``requests``, ``trace``: the files, or None."""
    replay, plan = llm.replays, None
    if replay:
        llm.start_recording()
        measured_pass(llm, work, progress=False)
        plan = llm.stop_recording()  # admissions: only a serve pass replays them
    if trace:
        llm.start_profile(trace)
    llm.collect_control_stats()  # forget what came before (warm-up, recording pass, previous repeat)
    if replay:
        llm.start_replay()
    with open_run_file(requests) as log, sampler, OtherCpu() as others:
        row, steps = measured_pass(llm, work, progress, plan, log)
    if replay:
        llm.finish_replay()
    stats = llm.collect_control_stats()
    traces = llm.finish_profile() if trace else []
    if step_log:
        write_step_log(step_log, steps, stats)
    row.update({**metrics.step_metrics(steps), **metrics.control_metrics(stats, steps),
                **sampler.summary(row["output_tokens"]), "cpu_others_cores": others.cores,
                "preemptions": row.get("preemptions", llm.scheduler.num_preemptions),
                "prefix_cache_hit_tokens": llm.block_manager.num_cache_hit_tokens,
                "kv_blocks": llm.num_kvcache_blocks, "kvcache_block_size": llm.config.kvcache_block_size})
    return row, traces, stats["silent_s"]


def run_worker_rank(cfg: DictConfig, launch: Launch) -> int:
    """A rank other than 0 under torchrun (checked up front as rank 0 is: ``job_checks``), serving rank 0's run. Returns
    the exit code: 0 after rank 0's exit message, 1 on a failure, 2 on bad input (here, or refused by rank 0)."""
    try:
        if cfg.workload.get("kind") == "broadcast":
            return serve(launch, broadcast_worker, (cfg.tp, cfg.llm.timeout_s), cfg.llm.startup_timeout_s)
        device = resolve_device(cfg.device)
        path, _ = prepare(cfg, device, None)
        config = EngineConfig(**engine_settings(cfg, path, device)[0])
    except (ConfigError, ValueError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return serve_worker(config)


def run_job(cfg: DictConfig) -> int:
    """Run the configured job; returns the exit code (0 ok, 1 a run failed or stalled, 2 bad input, 130 interrupted)."""
    launch = Launch.from_env()
    broadcast = cfg.workload.kind == "broadcast"
    if not broadcast:
        resolve_model(cfg, resolve_device(cfg.device))
    if launch is not None and launch.rank != 0:
        return run_worker_rank(cfg, launch)
    if cfg.profile != "none" and (broadcast or cfg.engine == "hf"):
        why = "workload=broadcast runs no engine step" if broadcast else "it traces this engine (engine=tp) only"
        print(f"note: profile={cfg.profile}: {why}, so this job writes no trace", file=sys.stderr)
    if broadcast:
        return run_broadcast_job(cfg, launch)
    if cfg.engine == "hf":
        return run_hf_job(cfg)
    return run_engine_job(cfg, launch)


def run_repeat(cfg: DictConfig, llm: LLM, work: Workload, results, row0: dict, gpus: list[int]) -> bool:
    """One timed run (``row0["run_id"]`` names its files): its row appended to ``results``, printed with its files.
    Returns whether a rank stalled in it (its row says so; its numbers are no measurement)."""
    sampler = NvmlSampler(gpus, cfg.nvml_interval_s)
    run_id, directory = row0["run_id"], os.path.dirname(results.path)
    steps = os.path.join(directory, "steps", f"{run_id}.csv") if cfg.step_log else None
    saves = cfg.save_requests and work.arrivals is not None
    requests = os.path.join(directory, "requests", f"{run_id}.jsonl") if saves else None
    trace = os.path.join(directory, "traces", run_id) if cfg.profile != "none" else None
    metrics_row, traces, silent = timed_run(llm, work, sampler, show_progress(cfg.progress), steps, requests, trace)
    stalls = stall_error(silent)
    row = {**row0, "status": "stalled" if stalls else "ok", "error": stalls or None, **metrics_row}
    written = results.add(row)
    files = [f"requests    {requests} (one JSON line per request, in the order they finished)"] if requests else []
    if trace:
        files += trace_lines(traces, cfg.profile_steps, row["prefill_steps"] + row["decode_steps"])
    floor = floor_lines(row, work, llm) if gpus and not stalls else []  # a stalled run's rate is no measure of it
    print_summary(row, written, steps, files, results.run_file, floor)
    if stalls:
        print(f"error: repeat {row['repeat']} stalled: {stalls}", file=sys.stderr)
    else:
        SWEEP_ROWS.append(row)
    return bool(stalls)


def warm_up(llm: LLM, work: Workload, device: str) -> None:
    """The untimed warm-up: one short greedy request (a graphed prefill, decode steps), and on CUDA the workload's
    first ``WARM_PROMPTS`` prompts for 2 tokens at their own settings. Without the latter, every model's first
    `bench` repeat paid ~2.7 s more TTFT than the next (calls 75-76): paths only a large prefill takes."""
    llm.generate([work.prompts[0][:64]], SamplingParams(temperature=0, ignore_eos=True,
                                                        max_tokens=min(16, work.params[0].max_tokens)))
    if device == "cuda":
        n = min(WARM_PROMPTS, len(work.prompts))
        llm.generate(work.prompts[:n], [replace(p, max_tokens=min(2, p.max_tokens)) for p in work.params[:n]])


def run_engine_job(cfg: DictConfig, launch: Launch | None) -> int:
    """``repeat`` timed runs after an untimed warm-up; exit code 0, 1 (a failed or unwritten row), 2, 130."""
    device = resolve_device(cfg.device)
    row0 = base_row(cfg, device)
    llm, results, path, repeat, ok, reuse = None, None, None, 0, False, False
    try:
        results = check_results_dir(cfg)  # first: a stop signal from here on leaves a failed row
        path, work = prepare(cfg, device, results)
        model, model_hash = model_label(cfg, path)
        row0.update(model=model, model_hash=model_hash, **serve_columns(work))
        settings, async_scheduling = engine_settings(cfg, path, device)
        reuse = cfg.reuse_engine and launch is None  # under torchrun the other ranks follow each job
        llm, reused = engine_cache.get_engine(settings, reuse)
        llm.set_async_scheduling(async_scheduling)
        if reused:
            print(f"  reusing the engine of the previous job ({cfg.control.name}, tp={cfg.tp}, {model})")
        row0.update(llm.describe())
        if work.warmup:
            warm_up(llm, work, device)
        gpus = list(range(launch.local_world_size if launch else cfg.tp)) if device == "cuda" else []
        stalled = False
        for repeat in range(cfg.repeat):
            row0.update(repeat=repeat, run_id=new_run_id())  # a failed run's row keeps it: one id for its files
            stalled |= run_repeat(cfg, llm, work, results, dict(row0), gpus)
        ok = True
        return 1 if results.problem or stalled else 0
    except BaseException as e:
        e = as_interrupt(e)
        if from_torchrun_agent() and llm is not None:  # stopped by torchrun's agent: because a rank died?
            try:
                llm.check_workers(wait_s=1.0, stopped_with=str(e))  # up to 1 s
            except WorkerError as dead:
                e = dead
            except KeyboardInterrupt as stopped:  # a worker a stop signal ended first: its signal, not the echo
                e = worker_stopped(stopped)
        if isinstance(e, (ConfigError, ValueError, TypeError)) and llm is None:  # bad input: no row
            print(f"error: {job_setup.damaged_preset(cli_message(str(e), cfg.llm.keys()), cfg, path)}", file=sys.stderr)
            return 2
        if results is None:
            raise e from None
        return failed(results, row0, repeat, e, cfg.repeat)
    finally:
        if not ok or not reuse:
            engine_cache.release()


def run_hf(cfg: DictConfig, path: str, work: Workload, device: str, dtype: str) -> tuple[dict, int]:
    """(the metric columns of one timed pass after an untimed warm-up, the tokens generated, padding included): the
    workload's ``iterations`` passes over its requests, in left-padded batches of ``hf_batch_size`` run to their largest
    ``max_tokens``; only each request's own tokens count as output. TTFT, TPOT and ITL stay empty; E2EL is its batch's
    end from its pass's start (the pass submits every request at once, as the engine's generate call)."""
    from transformers import Qwen3ForCausalLM
    from transformers.utils import logging as hf_logging

    (hf_logging.enable_progress_bar if show_progress(cfg.progress) else hf_logging.disable_progress_bar)()
    model = Qwen3ForCausalLM.from_pretrained(path, dtype=torch_dtype(dtype)).to(device).eval()
    torch.manual_seed(cfg.seed)
    batch_size = cfg.hf_batch_size

    def generate(prompts: list[list[int]], max_new: int, temperature: float) -> None:
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        kwargs = dict(do_sample=True, temperature=temperature) if temperature > 0 else dict(do_sample=False)
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, min_new_tokens=max_new,
                           pad_token_id=0, **kwargs)
        if device == "cuda":
            torch.cuda.synchronize()

    generate([work.prompts[0][:32]], 8, 0.0)  # warm-up
    start = time.perf_counter()
    e2el, generated = [], 0
    batches = [i for _ in range(work.iterations) for i in range(0, len(work.prompts), batch_size)]
    for i in tqdm(batches, desc="hf generate", disable=not show_progress(cfg.progress)):
        if i == 0:  # an iteration submits the whole batch at once, as the engine's generate call does
            submitted = time.perf_counter()
        prompts, params = work.prompts[i:i + batch_size], work.params[i:i + batch_size]
        max_new = max(p.max_tokens for p in params)
        generate(prompts, max_new, params[0].temperature)
        e2el += [(time.perf_counter() - submitted) * 1e3] * len(prompts)
        generated += max_new * len(prompts)
    duration, n = time.perf_counter() - start, work.iterations
    row = metrics.throughput(n * len(work.prompts), n * sum(work.prompt_lens),
                             n * sum(p.max_tokens for p in work.params), duration)
    return {**row, **metrics.summarize(e2el, "e2el_ms")}, generated


def run_hf_job(cfg: DictConfig) -> int:
    """``engine=hf``: transformers' ``generate`` on one device; exit code 0, 1 (a failed row), 2 (bad input), 130."""
    device = resolve_device(cfg.device)
    threads = torch.get_num_threads() if device == "cpu" else None  # transformers' generate: torch's own count
    row0 = {**base_row(cfg, device), "control": None, "cpu_threads": threads}
    results, work, repeat = None, None, 0
    try:
        results = check_results_dir(cfg)
        path, work = prepare(cfg, device, results)
        row0["model"], row0["model_hash"] = model_label(cfg, path)
        for repeat in range(cfg.repeat):
            with NvmlSampler([0] if device == "cuda" else [], cfg.nvml_interval_s) as sampler, OtherCpu() as others:
                metrics_row, generated = run_hf(cfg, path, work, device, row0["dtype"])
            row = {**row0, "repeat": repeat, "status": "ok", **metrics_row, "cpu_others_cores": others.cores,
                   **sampler.summary(metrics_row["output_tokens"])}
            print(f"  transformers generated {generated} tokens for {row['output_tokens']} requested "
                  f"({generated - row['output_tokens']} padding waste, not counted)")
            print_summary(row, results.add(row), run_file=results.run_file)
            SWEEP_ROWS.append(row)
        return 1 if results.problem else 0
    except BaseException as e:  # bad input before the runs: no row; else its failed row, once there is a file
        if isinstance(e, ConfigError) and work is None:
            print(f"error: {e}", file=sys.stderr)
            return 2
        if results is None:
            raise
        return failed(results, row0, repeat, e, cfg.repeat)
