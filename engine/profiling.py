"""``profile=torch``: a Chrome trace per rank of a window of a pass's steps (torch.profiler), and NVTX ranges
on CUDA that mark each step's phases on every rank (for Nsight Systems).

The engine's ``profile`` setting (``EngineConfig``) is "none" (the default: nothing of this module runs; rank
0's step path pays one attribute test where it sends and one where it waits for tokens, the workers' command
loop nothing) or "torch". ``profile_steps`` picks the window: "FIRST-LAST" (both
included) or "N", counted from 0 over the ``run`` steps of the pass being profiled; None = every step.
The owner of the engine arms every rank before a pass (``LLM.start_profile``) and ends it after
(``LLM.finish_profile``): between the two each rank counts its ``run`` steps, records the window with
torch.profiler (CPU activity, and CUDA activity on CUDA) and writes ``<prefix>_rank<k>.json``.

The NVTX ranges (CUDA only, while profiling is on, armed or not): rank 0 ``send`` (a message going out),
``step launch`` (its ``run()``), ``step end`` (waiting for the step's tokens); workers ``recv`` (waiting for
and reading a message), ``step launch`` (their ``run()``) and a ``step end`` mark when it returns (a worker
waits for nothing at a step's end). Inside the window the same names label the Chrome trace.
"""

from __future__ import annotations

import contextlib
import os
import sys

from .errors import ConfigError

PROFILE_MODES = ("none", "torch")
PROFILE = "profile"  # control message: ("arm", prefix) before a pass, ("finish",) after it


def profile_problem(profile) -> str | None:
    """Why ``profile`` is not a profiling mode, or None when it is one."""
    if profile in PROFILE_MODES:
        return None
    return f"profile must be one of {', '.join(PROFILE_MODES)}, got {'' if profile is None else str(profile)!r}"


def parse_window(profile_steps) -> tuple[int, int] | None:
    """``profile_steps`` as (first, last) step numbers, both included, counted from 0: "20-40" -> (20, 40),
    "5" or 5 -> (5, 5); None -> None (every step).

    Raises:
        ConfigError: anything else (one line, naming the form it takes).
    """
    if profile_steps is None:
        return None
    text = str(profile_steps).strip().lower()
    first, sep, last = text.partition("-")
    if isinstance(profile_steps, bool) or not first.isdigit() or (sep and not last.isdigit()):
        raise ConfigError(f"profile_steps must be FIRST-LAST or N (step numbers of the timed run, from 0), "
                          f"got {text!r}")
    window = (int(first), int(last) if sep else int(first))
    if window[0] > window[1]:
        raise ConfigError(f"profile_steps={text}: the first step is after the last (give FIRST-LAST, "
                          f"FIRST <= LAST)")
    return window


def check_profile(profile, profile_steps) -> None:
    """The profiling settings as the engine takes them (``EngineConfig`` and the harness's up-front checks
    both call this: the rules live here only).

    Raises:
        ConfigError: a mode other than none / torch, or a window that is not FIRST-LAST or N.
    """
    problem = profile_problem(profile)
    if problem:
        raise ConfigError(problem)
    parse_window(profile_steps)


def trace_path(prefix: str, rank: int) -> str:
    """Where rank ``rank`` writes the trace of a pass armed with ``prefix``: ``<prefix>_rank<rank>.json``."""
    return f"{prefix}_rank{rank}.json"


class StepProfiler:
    """One rank's profiling for ``profile=torch``.

    Args:
        window: (first, last) steps to record, both included (``parse_window``); None: every step.
        rank: this rank (names its trace file).
        device: "cuda" or "cpu": CUDA activity and NVTX ranges on CUDA only.
    Attributes:
        prefix: of the armed pass's trace files (None: not armed); path: this rank's (``trace_path``);
        step: ``run`` steps of the armed pass so far; prof: its torch.profiler once its window has started.
    """

    def __init__(self, window: tuple[int, int] | None, rank: int, device: str):
        self.first, self.last = window if window is not None else (0, sys.maxsize)
        self.rank, self.cuda = rank, device == "cuda"
        self.prefix: str | None = None
        self.path: str | None = None
        self.step = 0
        self.prof = None
        self.recording = False

    def command(self, action: str, *args) -> str | None:
        """A ``PROFILE`` message: ("arm", prefix) or ("finish",); "finish" returns the trace written, if any."""
        if action == "arm":
            self.arm(args[0])
            return None
        return self.finish()

    def arm(self, prefix: str) -> None:
        """Count the coming pass's steps from 0 and record the window into ``trace_path(prefix, rank)`` (a
        previous pass's recording, if still open, is dropped)."""
        self._stop()
        self.prefix, self.path, self.step, self.prof = prefix, trace_path(prefix, self.rank), 0, None

    def before_step(self) -> None:
        """Before step ``self.step``'s ``run()``: start recording at the window's first step, mark each later
        step (``ProfilerStep#<step>`` in the trace spans one step's launch to the next's), stop after the
        last (the step after the window is not recorded)."""
        if self.path is None:
            return
        if self.step == self.first:
            self._start()
        elif self.recording and self.step <= self.last:
            self.prof.step()
        elif self.recording:
            self._stop()

    def after_step(self) -> None:
        """After a step's ``run()`` returned: the next step's number."""
        self.step += 1

    def finish(self) -> str | None:
        """End the armed pass: stop recording and write the trace. Returns its path, or None when the pass
        never reached the window (fewer steps than its first) or the file cannot be written (one line on
        stderr: the run itself goes on)."""
        self._stop()
        path, prof, self.prefix, self.path, self.prof = self.path, self.prof, None, None, None
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

        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        # acc_events: one cycle from start() to stop(); without it torch warns on CUDA that cycles clear events
        self.prof = torch.profiler.profile(activities=activities, schedule=_record_every_step, acc_events=True)
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

        label = torch.profiler.record_function(name) if self.recording else None
        if self.cuda:
            torch.cuda.nvtx.range_push(name)
        if label is not None:
            label.__enter__()
        try:
            yield
        finally:
            if label is not None:
                label.__exit__(None, None, None)
            if self.cuda:
                torch.cuda.nvtx.range_pop()

    def mark(self, name: str) -> None:
        """An NVTX mark ``name`` (an instant; CUDA only)."""
        import torch

        if self.cuda:
            torch.cuda.nvtx.mark(name)

    def close(self) -> None:
        """Stop a recording left open (a run that failed mid-window); nothing is written."""
        self._stop()
        self.prefix = self.path = self.prof = None


def _record_every_step(step: int):
    """torch.profiler's schedule: record every step from start() to stop() (a schedule of its own makes it
    label each step ``ProfilerStep#<n>``; we start and stop it ourselves)."""
    import torch

    return torch.profiler.ProfilerAction.RECORD


def make_profiler(config, rank: int) -> StepProfiler | None:
    """This rank's :class:`StepProfiler` for ``config`` (an ``EngineConfig``), None when ``profile`` is none."""
    if config.profile == "none":
        return None
    return StepProfiler(parse_window(config.profile_steps), rank, config.device)


class ProfiledRunner:
    """A ``ModelRunner`` whose ``run()`` steps are counted and recorded by ``profiler`` (in a ``step launch``
    range, a ``step end`` mark after it on workers); every other attribute is the runner's."""

    def __init__(self, runner, profiler: StepProfiler, end_mark: bool):
        self._runner, self._profiler, self._end_mark = runner, profiler, end_mark

    def __getattr__(self, name: str):
        return getattr(self._runner, name)

    def run(self, step: bytes):
        profiler = self._profiler
        profiler.before_step()
        with profiler.range("step launch"):
            tokens = self._runner.run(step)
        if self._end_mark:
            profiler.mark("step end")
        profiler.after_step()
        return tokens


class ProfiledEndpoint:
    """A worker's control-plane end whose ``recv()`` waits in a ``recv`` range and carries out ``PROFILE``
    messages itself (the command loop never sees them); every other attribute is the endpoint's."""

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
            self._profiler.command(*args)
