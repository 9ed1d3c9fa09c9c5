"""``profile=torch``: a Chrome trace per rank of the ``profile_steps`` window of a pass (``LLM.start_profile`` to
``LLM.finish_profile``; steps counted from 0), and on CUDA NVTX ranges: rank 0 ``send``, ``step launch``, ``step
end``; workers ``recv``, ``step launch`` and a ``step end`` mark."""

from __future__ import annotations

import contextlib
import os
import re
import sys

from common import ConfigError

PROFILE_MODES = ("none", "torch")
PROFILE = "profile"  # control message: ("arm", prefix) before a pass, ("finish",) after it


def profile_problem(profile) -> str | None:
    """Why ``profile`` is not a profiling mode, or None when it is one."""
    return None if profile in PROFILE_MODES else (f"profile must be one of {', '.join(PROFILE_MODES)}, got "
                                                  f"{'' if profile is None else str(profile)!r}")


def parse_window(profile_steps) -> tuple[int, int] | None:
    """``profile_steps`` as (first, last) step numbers, both included, from 0: "20-40" -> (20, 40), "5" or 5 ->
    (5, 5); None -> None (every step). Raises ConfigError: anything else."""
    if profile_steps is None:
        return None
    text = str(profile_steps).strip().lower()
    steps = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", text)  # not str.isdigit: it takes "²", which int() refuses
    if isinstance(profile_steps, bool) or steps is None:
        raise ConfigError(f"profile_steps must be FIRST-LAST or N (step numbers of the timed run, from 0), "
                          f"got {text!r}")
    window = (int(steps[1]), int(steps[2] or steps[1]))
    if window[0] > window[1]:
        raise ConfigError(f"profile_steps={text}: the first step is after the last (give FIRST-LAST, FIRST <= LAST)")
    return window


def trace_path(prefix: str, rank: int) -> str:
    """Where rank ``rank`` writes the trace of a pass armed with ``prefix``: ``<prefix>_rank<rank>.json``."""
    return f"{prefix}_rank{rank}.json"


class StepProfiler:
    """One rank's profiling: ``window`` (first, last) steps to record (None: all), CUDA activity and NVTX ranges
    on "cuda". ``prefix`` / ``path``: the armed pass's (None: not armed); ``step``: its ``run`` steps so far."""

    def __init__(self, window: tuple[int, int] | None, rank: int, device: str):
        self.first, self.last = window if window is not None else (0, sys.maxsize)
        self.rank, self.cuda = rank, device == "cuda"
        self.prefix = self.path = self.prof = None
        self.step, self.recording = 0, False

    def arm(self, prefix: str) -> None:
        """Count the coming pass's steps from 0, to record the window into ``trace_path(prefix, rank)``."""
        self._stop()
        self.prefix, self.path, self.step, self.prof = prefix, trace_path(prefix, self.rank), 0, None

    def before_step(self) -> None:
        """At step ``self.step``'s start (rank 0: before its send; a worker: before its recv), so that its window
        holds its send and receive: start recording at the window's first, mark each later one
        (``ProfilerStep#<step>``), stop after the last."""
        if self.path is not None and self.step == self.first:
            self._start()
        elif self.recording and self.step <= self.last:
            self.prof.step()
        elif self.recording:
            self._stop()

    def finish(self) -> str | None:
        """End the armed pass, writing the trace. Returns its path; None: no step recorded, or the file cannot be
        written (one line on stderr: the run goes on)."""
        path, prof = self.path, self.prof
        self.close()
        if path is None or prof is None:
            return None
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            prof.export_chrome_trace(path)
        except OSError as e:
            print(f"error: rank {self.rank}: cannot write the trace {path}: {e.strerror or e}", file=sys.stderr)
            return None
        return path

    def _start(self) -> None:
        import torch  # here, not at the top: EngineConfig's checks import this module without torch

        kinds = torch.profiler.ProfilerActivity
        activities = [kinds.CPU, kinds.CUDA] if self.cuda else [kinds.CPU]
        # acc_events: one cycle from start() to stop() (else torch warns on CUDA); the schedule labels the steps.
        self.prof = torch.profiler.profile(activities=activities, acc_events=True,
                                           schedule=lambda step: torch.profiler.ProfilerAction.RECORD)
        self.prof.step_num = self.first  # ProfilerStep#<n> carries the pass's own step numbers
        self.prof.start()
        self.recording = True

    def _stop(self) -> None:
        if self.recording:
            self.recording = False
            self.prof.stop()

    @contextlib.contextmanager
    def range(self, name: str):
        """An NVTX range ``name`` (CUDA), and inside the window a label of the same name in the trace."""
        import torch

        nvtx = torch.cuda.nvtx.range(name) if self.cuda else contextlib.nullcontext()
        label = torch.profiler.record_function(name) if self.recording else contextlib.nullcontext()
        with nvtx, label:
            yield

    def close(self) -> None:
        """Stop a recording left open (a run that failed mid-window); nothing is written."""
        self._stop()
        self.prefix = self.path = self.prof = None


def make_profiler(config, rank: int) -> StepProfiler | None:
    """This rank's :class:`StepProfiler` for ``config`` (an ``EngineConfig``), None when ``profile`` is none."""
    return None if config.profile == "none" else StepProfiler(parse_window(config.profile_steps), rank, config.device)


class ProfiledRunner:
    """A ``ModelRunner`` whose ``run()`` steps ``profiler`` counts and records (a ``step launch`` range). On a
    ``worker`` each run ends with a ``step end`` mark and opens the next step's window, before its recv; rank 0's
    ``LLM.call`` opens it before the send."""

    def __init__(self, runner, profiler: StepProfiler, worker: bool):
        self._runner, self._profiler, self._worker = runner, profiler, worker

    def __getattr__(self, name: str):
        return getattr(self._runner, name)

    def run(self, step: bytes):
        import torch

        profiler = self._profiler
        with profiler.range("step launch"):
            tokens = self._runner.run(step)
        profiler.step += 1
        if self._worker:
            if profiler.cuda:
                torch.cuda.nvtx.mark("step end")  # an instant
            profiler.before_step()
        return tokens


class ProfiledEndpoint:
    """A worker's control-plane end whose ``recv()`` waits in a ``recv`` range and carries out ``PROFILE``
    messages itself (the command loop never sees them)."""

    def __init__(self, endpoint, profiler: StepProfiler):
        self._endpoint, self._profiler = endpoint, profiler

    def __getattr__(self, name: str):
        return getattr(self._endpoint, name)

    def recv(self) -> tuple[str, tuple]:
        while True:
            with self._profiler.range("recv"):
                method, args = self._endpoint.recv()
            if method != PROFILE:
                return method, args
            if args[0] == "arm":
                self._profiler.arm(args[1])
                self._profiler.before_step()  # step 0's window opens before its recv
            else:
                self._profiler.finish()
