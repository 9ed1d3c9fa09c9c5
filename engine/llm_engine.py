"""The user-facing engine: rank 0's driver loop over the scheduler, the control plane and the model runner."""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import time

import torch
from tqdm.auto import tqdm

from common import is_int, is_number
from runtime.cluster import Cluster

from .config import ConfigError, EngineConfig
from .llm_tools import LLMTools
from .loader import check_checkpoint
from .model_runner import ModelRunner
from .model_worker import model_worker
from .profiling import ProfiledRunner, make_profiler
from .scheduler import Arrivals, BlockManager, Scheduler
from .sequence import SamplingParams, Sequence
from .step_batch import InFlightStep, StepBatch, StepRecord

log = logging.getLogger("engine")


class LLM(LLMTools, contextlib.AbstractContextManager):
    """A tensor-parallel Qwen3 engine: rank 0 in this process, ranks 1..tp-1 in workers; ``options``: the other
    :class:`EngineConfig` fields. A context manager; :meth:`shutdown` also runs at exit. Raises ConfigError: bad
    configuration or checkpoint (before any process is spawned); WorkerError: a worker failed while starting."""

    def __init__(self, model: str, **options):
        EngineConfig.refuse_unknown(options)
        self.config = EngineConfig(model=model, **options)
        check_checkpoint(self.config.model, self.config.hf_config)
        if torch.distributed.is_initialized():
            raise ConfigError("this process already runs an engine (or another torch.distributed job): "
                              "one LLM per process; shut the other one down first")
        self.cluster = self.control = self.runner = self.profiler = None
        self._closed, self._mid_call = False, False  # _mid_call: a call() that did not return (workers mid-step?)
        atexit.register(self.shutdown)
        try:
            cfg, launch, tp, t0 = self.config, self.config.launch, self.config.tensor_parallel_size, time.perf_counter()
            log.info("starting: tp=%d on %s (%s), control=%s", tp, cfg.device, cfg.dtype, cfg.control)
            self.cluster = Cluster(tp, cfg.timeout_s, cfg.startup_timeout_s, launch, cfg.control, cfg.control_options,
                                   self._teardown)
            self.control, group = self.cluster.control, self.cluster.group
            log.info("%s", "waiting for torchrun's ranks" if launch else f"spawning {tp - 1} worker(s)")
            self.cluster.start(model_worker, (cfg, None))
            self.runner = ModelRunner(cfg, 0, group.store, group.wait_for, launch.local_rank if launch else 0,
                                      group.context.num_nodes)
            self.profiler = make_profiler(cfg, 0)  # None unless profile != none
            if self.profiler is not None:
                self.runner = ProfiledRunner(self.runner, self.profiler, end_mark=False)
            log.info("ready in %.1f s: %d KV blocks per rank, all-reduce %s", time.perf_counter() - t0,
                     self.runner.num_kvcache_blocks, self.runner.all_reduce)
        except BaseException as e:
            try:
                if isinstance(e, Exception) and self.cluster is not None:
                    self.cluster.explain(e, None, wait_s=0.5)  # a worker that died while starting explains ours
            finally:
                self.shutdown(grace_s=0.5)  # workers still starting cannot read an exit message: no long wait
            raise
        self._in_flight: InFlightStep | None = None
        self.reset()

    def reset(self) -> None:
        """Back to the state right after start-up (empty scheduler, cold prefix cache, generator reseeded), so the
        same requests give the same steps (``control=ideal`` replays). Raises RuntimeError: requests in progress."""
        if hasattr(self, "scheduler") and self.has_unfinished_requests():
            raise RuntimeError("reset() while requests are in progress")
        self.block_manager = BlockManager(self.runner.num_kvcache_blocks, self.config.kvcache_block_size)
        self.scheduler = Scheduler(self.config.max_num_seqs, self.config.max_num_batched_tokens,
                                   self.config.max_model_len, self.block_manager, self.config.eos_token_ids)
        self.generator = torch.Generator().manual_seed(self.config.seed)  # draws each sampled step's seed
        self.arrivals = Arrivals()
        self.steps, self._last_done_s = [], None
        self.admit_ns = 0  # time spent admitting arrivals (not waiting for them), ns

    def __exit__(self, *exc) -> None:
        self.shutdown()

    @property
    def num_kvcache_blocks(self) -> int:
        return self.runner.num_kvcache_blocks

    def call(self, method: str, *args):
        """Run ``method(*args)`` on every rank (SPMD); returns rank 0's result. Raises WorkerError: a worker failed."""
        self._mid_call = True
        if self.profiler is None:  # profile=none: this test is all profiling costs a call
            self.cluster.send(method, *args)
        else:
            with self.profiler.range("send"):
                self.cluster.send(method, *args)
        try:
            out = getattr(self.runner, method)(*args)
            self._mid_call = False
            return out
        except Exception as e:  # a worker's failure explains ours: raise that one
            collective = isinstance(e, torch.distributed.DistError) or "gloo" in str(e) or "NCCL" in str(e)
            self.cluster.explain(e, "a collective" if collective else None)
            raise

    def add_request(self, prompt_token_ids: list[int], sampling_params: SamplingParams,
                    arrival_s: float | None = None) -> int:
        """Queue one request, admitted at the first step boundary at or after ``arrival_s`` (perf_counter() s; None:
        now). Returns its ``request_id``. Raises ConfigError: it can never be served (``_check_requests``,
        ``arrival_times``)."""
        self._check_requests([prompt_token_ids], [sampling_params])
        [t] = arrival_times(None if arrival_s is None else [arrival_s])
        return self._add(prompt_token_ids, sampling_params, t)

    def _check_requests(self, prompts: list[list[int]], params: list[SamplingParams]) -> None:
        """Raises ConfigError (one line, naming the prompt): no prompts, a params/prompts count mismatch, a prompt
        not a list of ints, empty, ``max_model_len`` tokens or more, out of the vocabulary, or over the KV cache."""
        cfg, num_blocks, vocab = self.config, self.num_kvcache_blocks, self.config.hf_config["vocab_size"]
        if not prompts:
            raise ConfigError("generate() needs at least one prompt")
        if len(params) != len(prompts):
            raise ConfigError(f"{len(params)} sampling params for {len(prompts)} prompts")
        for i, (p, sp) in enumerate(zip(prompts, params, strict=True)):
            if not isinstance(p, (list, tuple)) and not (hasattr(p, "ndim") and p.ndim == 1):
                raise ConfigError(f"prompt {i} is a {type(p).__name__}; prompt_token_ids is a list of token-id lists")
            if len(p) == 0:
                raise ConfigError(f"prompt {i} is empty")
            if not all(type(t) is int for t in p) and not all(is_int(t) for t in p):  # (the first: 10x faster)
                raise ConfigError(f"prompt {i} has a token id that is not an integer")
            if len(p) >= cfg.max_model_len:
                raise ConfigError(f"prompt {i} has {len(p)} tokens; max_model_len={cfg.max_model_len} leaves "
                                  f"no room to generate")
            if min(p) < 0 or max(p) >= vocab:
                raise ConfigError(f"prompt {i} has a token id outside [0, {vocab})")
            need = math.ceil(min(len(p) + sp.max_tokens, cfg.max_model_len) / cfg.kvcache_block_size)
            if need > num_blocks:
                raise ConfigError(f"prompt {i} needs {need} KV blocks; the cache has {num_blocks}")

    def _add(self, prompt_token_ids, sampling_params: SamplingParams, arrival_s: float) -> int:
        if self._closed:
            raise RuntimeError("a request for an LLM that was shut down")
        seq = Sequence(list(map(int, prompt_token_ids)), sampling_params, self.config.kvcache_block_size)
        seq.arrival_s = arrival_s
        self.arrivals.add(seq)
        return seq.seq_id

    def has_unfinished_requests(self) -> bool:
        """Whether a request is pending (not yet arrived), waiting, running or in a step in flight."""
        return bool(self.arrivals) or not self.scheduler.is_finished() or self._in_flight is not None

    def generate(self, prompt_token_ids: list[list[int]], sampling_params: SamplingParams | list[SamplingParams],
                 use_tqdm: bool = False, arrival_s: list[float] | None = None) -> list[dict]:
        """:meth:`add_request` every prompt (now, or at ``arrival_s``), then :meth:`step` until nothing is
        unfinished. Returns :meth:`step`'s outputs in input order; the step records go to ``self.steps``. Raises
        ConfigError: bad prompts or parameters (before the first step); WorkerError: a worker failed."""
        if isinstance(sampling_params, SamplingParams):
            sampling_params = [sampling_params] * len(prompt_token_ids)
        self._check_requests(prompt_token_ids, sampling_params)
        times = arrival_times(arrival_s, len(prompt_token_ids))
        ids = [self._add(p, sp, t) for p, sp, t in zip(prompt_token_ids, sampling_params, times, strict=True)]
        self.steps, self._last_done_s = [], None
        done: dict[int, dict] = {}
        with tqdm(total=len(ids), desc="generate", unit="req", disable=not use_tqdm, dynamic_ncols=True) as bar:
            while self.has_unfinished_requests():
                finished = self.step()
                done.update((o["request_id"], o) for o in finished)
                bar.update(len(finished))
        return [done[i] for i in ids]

    def step(self) -> list[dict]:
        """Admit the arrived requests (while idle, first wait for one), launch a step, finish the one before it
        (async scheduling) or this one. Returns the finished requests: ``request_id``, ``token_ids`` (generated),
        ``finish_reason`` ("stop" or "length"), ``arrival_s``, ``first_scheduled_s``, ``token_times_s`` (perf_counter()
        s), ``num_preemptions``. Raises DataPlaneError / WorkerError / TimeoutError; RuntimeError: a scheduler bug."""
        self._admit()
        return [{"request_id": s.seq_id, "token_ids": s.completion_token_ids, "finish_reason": s.finish_reason,
                 "arrival_s": s.arrival_s, "first_scheduled_s": s.first_scheduled_s,
                 "token_times_s": s.token_times_s, "num_preemptions": s.num_preemptions} for s in self._step()]

    def _admit(self) -> None:
        t0 = time.perf_counter_ns()
        idle = self.scheduler.is_finished() and self._in_flight is None
        launches = len(self.arrivals.log)
        if idle:
            self._last_done_s = None  # the next step's time starts at its launch, not at the last one's end
        until = self.arrivals.wait_until(time.perf_counter(), launches, idle)
        t1 = time.perf_counter_ns()
        while until is not None and (left := until - time.perf_counter()) > 0:
            time.sleep(min(left, 0.5))
            self.cluster.check()
        t2 = time.perf_counter_ns()
        for seq in self.arrivals.due(time.perf_counter(), launches, idle):
            self.scheduler.add(seq)
        self.admit_ns += (t1 - t0) + (time.perf_counter_ns() - t2)

    def _step(self) -> list[Sequence]:
        launched = self._launch()
        if launched is None and self._in_flight is None and not self.scheduler.is_finished():
            launched = self._launch()  # the only running sequence was preempted: this prefills it
            if launched is None:
                raise RuntimeError("the scheduler found nothing to run with no step in flight")
        finished = self.finish_step()
        self._in_flight = launched
        if not self.config.async_scheduling:
            finished += self.finish_step()
        return finished

    def finish_step(self) -> list[Sequence]:
        """Finish the step in flight, if any, handing its tokens to the scheduler; returns the finished sequences."""
        step, self._in_flight = self._in_flight, None
        if step is None:
            return []
        if self.profiler is None:  # profile=none: this test is all profiling costs a step
            token_ids = step.wait_tokens(self.config.timeout_s, self.cluster.check)
        else:
            with self.profiler.range("step end"):
                token_ids = step.wait_tokens(self.config.timeout_s, self.cluster.check)
        # A CPU launch computes its step: tokens read after the next launch are stamped when they were made.
        now = time.perf_counter() if step.ready_s is None else step.ready_s
        finished = self.scheduler.postprocess(step.seqs, step.positions, token_ids, now)
        step.record.duration_s = now - (step.launch_s if self._last_done_s is None else self._last_done_s)
        self._last_done_s = now
        self.steps.append(step.record)
        return finished

    def _launch(self) -> InFlightStep | None:
        seqs, is_prefill = self.scheduler.schedule()
        if not seqs:
            return None
        t0 = time.perf_counter()
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=self.generator)) if any(
            s.temperature > 0 for s in seqs) else 0
        batch = StepBatch.from_sequences(seqs, is_prefill, seed)
        for seq in seqs:
            if seq.first_scheduled_s is None:
                seq.first_scheduled_s = t0
        self.arrivals.on_launch()
        tokens = self.call("run", batch.to_bytes())
        launch_ns = self.control.ns_since_send()
        host, done = InFlightStep.copy_to_host(tokens)
        ready_s = time.perf_counter() if done is None else None
        positions = self.scheduler.on_launch(seqs)
        message_bytes, send_ns = self.control.send_stats.last()
        record = StepRecord(is_prefill, len(seqs), len(batch.token_ids), 0.0, send_ns, message_bytes, launch_ns)
        return InFlightStep(seqs, positions, host, done, t0, record, ready_s)

    def shutdown(self, grace_s: float = 5.0) -> None:
        """Stop the workers (terminated, then killed, after ``grace_s`` s), process group, control plane; idempotent."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.shutdown)
        if self.cluster is not None:  # workers left in a step's collectives cannot read the exit message
            self.cluster.close(grace_s, exit_wait_s=0.5 if self._mid_call else 5.0)

    def _teardown(self) -> None:
        """Rank 0's part of the workers' body: the runner's process group, the profiler."""
        if self.runner is not None:
            with contextlib.suppress(Exception):
                self.runner.exit()
        if self.profiler is not None:
            self.profiler.close()


MAX_AHEAD_S = 86_400.0  # an arrival further ahead is a mistake (time.time() given for time.perf_counter())


def arrival_times(arrival_s: list | None, n: int = 1) -> list[float]:
    """The arrival times of ``n`` requests, ``time.perf_counter()`` s (None: all now). Raises ConfigError: not ``n``
    of them, or one that is not a finite number at most ``MAX_AHEAD_S`` ahead (it would never be served)."""
    now = time.perf_counter()
    if arrival_s is None:
        return [now] * n
    if len(arrival_s) != n:
        raise ConfigError(f"{len(arrival_s)} arrival times for {n} prompts")
    for t in arrival_s:
        if not is_number(t) or t - now > MAX_AHEAD_S:
            raise ConfigError(f"arrival time {t!r} is not a time.perf_counter() value within a day of now "
                              f"({now:.1f}): that request would never be served")
    return [float(t) for t in arrival_s]
