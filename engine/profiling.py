"""``profile=torch``: a Chrome trace per rank of a window of a pass's steps (torch.profiler), and NVTX ranges
on CUDA for each step's phases (Nsight Systems). ``LLM.start_profile`` arms every rank before a pass,
``LLM.finish_profile`` ends it; in between each rank counts its ``run`` steps from 0, records the
``profile_steps`` window and writes ``<prefix>_rank<k>.json``. NVTX ranges: rank 0 ``send``, ``step launch``,
``step end``; workers ``recv``, ``step launch`` and a ``step end`` mark.
"""

from __future__ import annotations

import contextlib
import os
import sys

from common import ConfigError

PROFILE_MODES = ("none", "torch")
PROFILE = "profile"  # control message: ("arm", prefix) before a pass, ("finish",) after it


def profile_problem(profile) -> str | None:
    """Why ``profile`` is not a profiling mode, or None when it is one."""
    if profile in PROFILE_MODES:
        return None
    return f"profile must be one of {', '.join(PROFILE_MODES)}, got {'' if profile is None else str(profile)!r}"


def parse_window(profile_steps) -> tuple[int, int] | None:
    """``profile_steps`` as (first, last) step numbers, both included, from 0: "20-40" -> (20, 40), "5" or 5 ->
    (5, 5); None -> None (every step). Raises ConfigError: anything else."""
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


def trace_path(prefix: str, rank: int) -> str:
    """Where rank ``rank`` writes the trace of a pass armed with ``prefix``: ``<prefix>_rank<rank>.json``."""
    return f"{prefix}_rank{rank}.json"


class StepProfiler:
    """One rank's profiling for ``profile=torch``: ``window`` (first, last) steps to record (``parse_window``;
    None: all), CUDA activity and NVTX ranges when ``device`` is "cuda". ``prefix`` / ``path``: the armed
    pass's (None: not armed); ``step``: its ``run`` steps so far; ``prof``: its torch.profiler once started."""

    def __init__(self, window: tuple[int, int] | None, rank: int, device: str):
        self.first, self.last = window if window is not None else (0, sys.maxsize)
        self.rank, self.cuda = rank, device == "cuda"
        self.prefix: str | None = None
        self.path: str | None = None
        self.step = 0
        self.prof = None
        self.recording = False

    def arm(self, prefix: str) -> None:
        """Count the coming pass's steps from 0 and record the window into ``trace_path(prefix, rank)``,
        dropping a previous pass's recording still open."""
        self._stop()
        self.prefix, self.path, self.step, self.prof = prefix, trace_path(prefix, self.rank), 0, None

    def before_step(self) -> None:
        """Before step ``self.step``'s ``run()``: start recording at the window's first step, mark each later
        one (``ProfilerStep#<step>`` spans one launch to the next), stop after the last."""
        if self.path is None:
            return
        if self.step == self.first:
            self._start()
        elif self.recording and self.step <= self.last:
            self.prof.step()
        elif self.recording:
            self._stop()

    def finish(self) -> str | None:
        """End the armed pass: stop recording and write the trace. Returns its path, or None when the pass never
        reached the window or the file cannot be written (one line on stderr: the run goes on)."""
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

        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        # acc_events: one cycle from start() to stop(); without it torch warns on CUDA that cycles clear events.
        # A schedule (record every step) makes it label steps ``ProfilerStep#<n>``.
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

        label = torch.profiler.record_function(name) if self.recording else contextlib.nullcontext()
        if self.cuda:
            torch.cuda.nvtx.range_push(name)
        try:
            with label:
                yield
        finally:
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


def make_profiler(config, rank: int) -> StepProfiler | None:
    """This rank's :class:`StepProfiler` for ``config`` (an ``EngineConfig``), None when ``profile`` is none."""
    if config.profile == "none":
        return None
    return StepProfiler(parse_window(config.profile_steps), rank, config.device)


class ProfiledRunner:
    """A ``ModelRunner`` whose ``run()`` steps ``profiler`` counts and records (a ``step launch`` range, then
    a ``step end`` mark with ``end_mark``); every other attribute is the runner's."""

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
        profiler.step += 1
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
            if args[0] == "arm":
                self._profiler.arm(args[1])
            else:
                self._profiler.finish()
