"""The user-facing engine: rank 0's driver loop over the scheduler, the control plane and the model runner."""

from __future__ import annotations

import atexit
import contextlib
import logging
import time

import torch
from tqdm.auto import tqdm

from runtime.blame import WorkerError
from runtime.cluster import Cluster

from .config import ConfigError, EngineConfig
from .llm_tools import LLMTools
from .loader import check_checkpoint
from .model_runner import ModelRunner
from .model_worker import model_worker
from .profiling import ProfiledRunner, make_profiler
from .requests import arrival_times, checked_requests
from .scheduler import Arrivals, BlockManager, Scheduler
from .sequence import SamplingParams, Sequence
from .step_batch import InFlightStep, StepBatch, StepRecord

log = logging.getLogger("engine")


class LLM(LLMTools, contextlib.AbstractContextManager):
    """A tensor-parallel Qwen3 engine: rank 0 in this process, ranks 1..tp-1 in workers; ``options``: the other
    :class:`EngineConfig` fields. A context manager; :meth:`shutdown` also runs at exit. Raises ConfigError: bad
    configuration or checkpoint (before any process is spawned); WorkerError: a worker failed while starting;
    TimeoutError: a rank missed a start-up stage; RuntimeError: no memory left for the KV cache, or
    ``all_reduce=symm_mem`` unavailable."""

    def __init__(self, model: str, **options):
        EngineConfig.refuse_unknown(options)
        self.config = EngineConfig(model=model, **options)
        check_checkpoint(self.config.model, self.config.hf_config)
        if torch.distributed.is_initialized():
            raise ConfigError("this process already runs an engine (or another torch.distributed job): "
                              "one LLM per process; shut the other one down first (one dropped without shutdown() "
                              "keeps its workers until this process exits)")
        self.cluster = self.control = self.runner = self.profiler = None
        self._closed, self._mid_call = False, True  # _mid_call: a call() that did not return (workers mid-step?);
        # until start-up is over, too: workers still starting cannot read an exit message (no long wait for them)
        self._broken: str | None = None  # why a step() that raised left the engine unusable
        atexit.register(self.shutdown)
        try:
            cfg, launch, tp, t0 = self.config, self.config.launch, self.config.tensor_parallel_size, time.perf_counter()
            log.info("starting: tp=%d on %s (%s), control=%s", tp, cfg.device, cfg.dtype, cfg.control)
            self.cluster = Cluster(tp, cfg.timeout_s, cfg.startup_timeout_s, launch, cfg.control, cfg.control_options,
                                   self._teardown)
            self.control, group = self.cluster.control, self.cluster.group
            log.info("%s", "waiting for torchrun's ranks" if launch else f"spawning {tp - 1} worker(s)")
            self.cluster.start(model_worker, (cfg, None), cfg.agreed())
            self.runner = ModelRunner(cfg, 0, group.store, group.wait_for, launch.local_rank if launch else 0,
                                      group.context.num_nodes)
            self.profiler = make_profiler(cfg, 0)  # None unless profile != none
            if self.profiler is not None:
                self.runner = ProfiledRunner(self.runner, self.profiler, worker=False)
            log.info("ready in %.1f s: %d KV blocks per rank, all-reduce %s", time.perf_counter() - t0,
                     self.runner.num_kvcache_blocks, self.runner.all_reduce)
        except BaseException as e:
            try:
                if isinstance(e, Exception) and not isinstance(e, ConfigError) and self.cluster is not None:
                    self.cluster.explain(e, None, wait_s=0.5)  # a worker that died while starting explains ours
            except WorkerError as w:
                raise w from None  # that one alone: ours repeats it ("During handling ..." and a second traceback)
            finally:
                self.shutdown(grace_s=0.5)
            raise
        self._in_flight: InFlightStep | None = None
        self._mid_call = False
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
        """Run ``method(*args)`` on every rank (SPMD); returns rank 0's result. Raises WorkerError: a worker failed;
        RuntimeError: an earlier call or step did not complete (the ranks may be out of step)."""
        if self._mid_call or self._broken:
            raise RuntimeError(self._broken or "an earlier call did not complete and the ranks may be out of step: "
                               "shut this LLM down and create a new one")
        self._mid_call = True
        if self.profiler is None:  # profile=none: this test is all profiling costs a call
            self.cluster.send(method, *args)
        else:
            if method == "run":
                self.profiler.before_step()  # the step's window holds its send
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
        now). Returns its ``request_id``. Raises ConfigError: it can never be served (``checked_requests``,
        ``arrival_times``); RuntimeError: the LLM was shut down."""
        [prompt], [params] = checked_requests(self.config, self.num_kvcache_blocks, [prompt_token_ids], sampling_params)
        [t] = arrival_times(None if arrival_s is None else [arrival_s])
        return self._add(prompt, params, t)

    def _add(self, prompt_token_ids: list[int], sampling_params: SamplingParams, arrival_s: float) -> int:
        if self._closed:
            raise RuntimeError("a request for an LLM that was shut down")
        seq = Sequence(prompt_token_ids, sampling_params, self.config.kvcache_block_size)
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
        ConfigError: bad prompts or parameters (before the first step); WorkerError: a worker failed; RuntimeError:
        requests queued by :meth:`add_request` are unfinished (their outputs would be dropped)."""
        if self._broken or self.has_unfinished_requests():
            raise RuntimeError(self._broken or "generate() while requests added by add_request() are unfinished: "
                               "step() them to the end first")
        prompts, params = checked_requests(self.config, self.num_kvcache_blocks, prompt_token_ids, sampling_params)
        times = arrival_times(arrival_s, len(prompts))
        ids = [self._add(p, sp, t) for p, sp, t in zip(prompts, params, times, strict=True)]
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
        s), ``num_preemptions``. Raises DataPlaneError / WorkerError / TimeoutError; ControlPlaneError: a send timed
        out (``control=ideal``'s replay: ScheduleMismatch, this step is not the recording's); KeyboardInterrupt: a
        worker stopped by a signal; RuntimeError: a scheduler bug, or an earlier step that raised (a caught Ctrl-C
        included): the engine is then unusable until shut down; the LLM was shut down."""
        if self._broken or self._closed:
            raise RuntimeError(self._broken or "step() on an LLM that was shut down")
        try:
            self._admit()
            finished = self._step()
        except BaseException as e:
            self._broken = (f"an earlier step() ended by {type(e).__name__} and the ranks may be out of step: shut "
                            f"this LLM down and create a new one")
            raise
        return [{"request_id": s.seq_id, "token_ids": s.completion_token_ids, "finish_reason": s.finish_reason,
                 "arrival_s": s.arrival_s, "first_scheduled_s": s.first_scheduled_s,
                 "token_times_s": s.token_times_s, "num_preemptions": s.num_preemptions} for s in finished]

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
