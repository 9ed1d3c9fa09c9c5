"""Beyond requests, what benchmarks need of :class:`LLM`: ideal's replays, stats, traces, settings, fault drills."""

from __future__ import annotations

from common import is_int

from .config import ConfigError
from .model_worker import FAULT_DRILL, fault_drill
from .profiling import PROFILE, trace_path


class LLMTools:
    @property
    def replays(self) -> bool:
        """Whether the control plane replays a recording (``control=ideal`` at tp > 1: at tp = 1 nothing is sent)."""
        return hasattr(self.control, "start_replay") and self.config.tensor_parallel_size > 1

    def start_recording(self) -> None:
        """(``replays``) Record the coming pass's step messages; they still travel over the inner plane."""
        self.control.start_recording()

    def stop_recording(self) -> list[tuple[int, bool]]:
        """(``replays``) Keep the recording; returns the pass's admissions (for :meth:`replay_admissions`)."""
        self.control.stop_recording()
        return list(self.arrivals.log)

    def replay_admissions(self, log: list[tuple[int, bool]] | None) -> None:
        """Admit each request of the coming pass before the same launch as in the pass that wrote ``log``
        (``Arrivals.log``; None: by arrival time alone)."""
        self.arrivals.plan = log

    def start_replay(self) -> None:
        """(``replays``) Ship the recording to the workers (untimed); the coming pass sends nothing."""
        self.control.start_replay()

    def finish_replay(self) -> None:
        """(``replays``) End the replay. Raises ``ScheduleMismatch`` when the pass sent fewer messages than the
        recording (a message that differs raises it at its own ``step``)."""
        self.control.finish_replay()

    def check_workers(self, wait_s: float = 0.0, stopped_with: str | None = None) -> None:
        """Raise ``WorkerError`` naming a worker that died, failed or stalled (its traceback awaited ``wait_s``), or
        ``KeyboardInterrupt`` naming one a stop signal ended (torchrun's ranks take them), unless that signal is
        ``stopped_with``, the one torchrun's agent sent this rank, and went to every rank (``WorkerGroup.check``)."""
        self.cluster.check(wait_s=wait_s, stopped_with=stopped_with)

    def set_async_scheduling(self, on: bool) -> None:
        """Switch async scheduling for the coming passes. Raises ConfigError: ``on`` is not a bool."""
        if not isinstance(on, bool):
            raise ConfigError(f"async_scheduling must be true or false, got {on!r}")
        self.config.async_scheduling = on

    def describe(self) -> dict:
        """``dtype``, ``all_reduce``, ``gemm``, ``cpu_threads`` and ``Cluster.describe``'s entries."""
        return {"dtype": self.config.dtype, "all_reduce": self.runner.all_reduce, "gemm": self.runner.gemm,
                "cpu_threads": self.runner.cpu_threads, **self.cluster.describe()}

    def inject_fault(self, rank: int, message: str) -> None:
        """A fault drill: rank ``rank`` raises ``RuntimeError(message)`` at once; the next step reports it
        (``WorkerError``). Raises RuntimeError: ``rank`` is 0; ConfigError (nothing sent): ``fault_injection`` is
        off, or no rank has that number."""
        if not self.config.fault_injection:
            raise ConfigError("inject_fault: this engine was built without fault_injection=True")
        if not is_int(rank) or not 0 <= rank < self.config.tensor_parallel_size:
            raise ConfigError(f"inject_fault: rank {rank!r} is not one of 0..{self.config.tensor_parallel_size - 1}")
        self.cluster.send(FAULT_DRILL, rank, message)
        fault_drill(self.config, 0, rank, message)

    def start_profile(self, prefix: str) -> None:
        """Profile the coming pass on every rank, into ``<prefix>_rank<k>.json``. Call it outside an ideal replay,
        before the statistics are reset (its message is one of theirs). Raises ConfigError: built without
        ``profile="torch"``."""
        self._need_profiler("start_profile")
        self.cluster.send(PROFILE, "arm", prefix)
        self.profiler.arm(prefix)

    def finish_profile(self) -> list[str]:
        """End the profiled pass, waiting for every rank's trace (this restarts the statistics: collect them first).
        Returns the trace files, rank 0's first, each on its node ([]: none written). Raises ConfigError: built
        without ``profile="torch"``; WorkerError / TimeoutError: a worker failed or did not answer."""
        self._need_profiler("finish_profile")
        prefix = self.profiler.prefix
        self.cluster.send(PROFILE, "finish")
        written = self.profiler.finish()
        self.collect_control_stats()  # every worker has finished its trace before it reports
        others = [trace_path(prefix, rank) for rank in range(1, self.config.tensor_parallel_size)]
        return [] if written is None else [written] + others

    def _need_profiler(self, what: str) -> None:
        if self.profiler is None:
            raise ConfigError(f"{what}: this engine was built without profile=\"torch\" (LLM(..., profile=\"torch\"))")

    def collect_control_stats(self) -> dict:
        """``Cluster.collect_stats``, each worker's ``launch_ns`` added. Raises WorkerError / TimeoutError."""
        return self.cluster.collect_stats()
