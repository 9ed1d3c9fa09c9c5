"""How busy other processes kept the host's CPUs during a timed run (``cpu_others_cores``): the busy time in
/proc/stat minus the run's own processes' (/proc/<pid>/stat, the launcher's tree), over the wall time, in cores.
The 1-min load average cannot say this: it lags a minute behind and counts the run's own ranks. Linux only."""

from __future__ import annotations

import contextlib
import os
import time

TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
CROWDED_CORES = 0.25  # other processes' load under this much is the machine's own noise, never flagged
MIN_WINDOW_S = 1.0  # over 1 s a tick or two of difference is <= 0.02 cores


def busy_ticks() -> int:
    """The host's CPU time spent out of idle since boot, all CPUs (ticks): user, nice, system, irq, softirq, steal."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    return user + nice + system + irq + softirq + steal


def _processes() -> dict[int, tuple[int, int]]:
    """{pid: (parent pid, CPU time in ticks: utime, stime, cutime, cstime)} of every process on the host."""
    out = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        except (OSError, IndexError):  # gone meanwhile
            continue
        out[int(name)] = (int(fields[1]), sum(map(int, fields[11:15])))
    return out


def tree_ticks(roots: set[int]) -> int:
    """CPU time (ticks) of ``roots`` and every process below them, their threads and reaped children included."""
    procs, children = _processes(), {}
    for pid, (parent, _) in procs.items():
        children.setdefault(parent, []).append(pid)
    mine, todo = set(), list(roots)
    while todo:
        if (pid := todo.pop()) not in mine:
            mine.add(pid)
            todo += children.get(pid, [])
    return sum(procs[pid][1] for pid in mine if pid in procs)


def run_roots() -> set[int]:
    """The processes whose trees hold this run's ranks on this host: this one; under torchrun the agents, the
    parents of every process of this run's ``TORCHELASTIC_RUN_ID`` (simulated nodes' agents too)."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id is None:
        return {os.getpid()}
    mark, roots = f"TORCHELASTIC_RUN_ID={run_id}".encode(), {os.getppid()}
    for pid, (parent, _) in _processes().items():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark in f.read().split(b"\0"):
                    roots.add(parent)
        except OSError:  # another user's, or gone
            continue
    return roots


class OtherCpu:
    """``with OtherCpu() as c: ...`` then ``c.cores``: the mean number of cores other processes kept busy during
    the block (float, >= 0); None where /proc cannot be read, or the block took under ``MIN_WINDOW_S`` (a process's
    10 ms ticks and /proc/stat's part ways by a tick or two). ``roots``: the run's processes (``run_roots``)."""

    def __init__(self, roots: set[int] | None = None):
        self.roots, self.cores, self._start = roots, None, None

    def _read(self) -> tuple[float, int, int] | None:
        try:
            return time.monotonic(), busy_ticks(), tree_ticks(self.roots)
        except (OSError, ValueError):
            return None

    def __enter__(self) -> OtherCpu:
        with contextlib.suppress(OSError):
            self.roots = self.roots or run_roots()
            self._start = self._read()
        return self

    def __exit__(self, *exc) -> None:
        end = self._read() if self._start is not None else None
        if end is not None and end[0] - self._start[0] >= MIN_WINDOW_S:
            others = (end[1] - self._start[1]) - (end[2] - self._start[2])
            self.cores = round(max(0.0, others / TICKS_PER_S / (end[0] - self._start[0])), 2)


def crowded(others, cores, threads):
    """Whether other processes' ``others`` cores and the run's own ``threads`` exceed the host's ``cores``: scalars
    or pandas Series alike (NaN: False)."""
    return (others >= CROWDED_CORES) & (others + threads > cores)


def shared_note(row: dict) -> str | None:
    """For the printout: how much other processes took of a run that shared the CPUs (``crowded``), or None. The
    run's own threads: ``cpu_threads`` per rank on CPU (recorded for engine=hf too), one per GPU rank."""
    threads = (row.get("tp") or 1) * ((row.get("cpu_threads") if row.get("device") == "cpu" else None) or 1)
    if row.get("cpu_others_cores") is None or not crowded(row["cpu_others_cores"], row["cpu_cores"], threads):
        return None
    return (f"other processes kept {row['cpu_others_cores']:.2f} of the {row['cpu_cores']} CPU cores busy, beside the "
            f"run's own {threads} threads: its timings are noisy")


def busy_note(df, side: str = "") -> str | None:
    """A line when ok rows (of ``side``, the gate's OLD or NEW) shared the CPUs with other work: ``crowded`` by
    ``cpu_others_cores``; rows before schema 12 by their 1-min load average at the job's start above the cores plus
    the run's ranks (a sweep's previous job, ranks like these, is still in that average). Bad cells count as empty."""
    import pandas as pd

    ok = df[df.status == "ok"]
    n = ok[["cpu_others_cores", "load_avg_1m", "cpu_cores", "tp", "cpu_threads"]].apply(pd.to_numeric, errors="coerce")
    threads = n.tp * n.cpu_threads.where(ok.device == "cpu").fillna(1)
    measured = n.cpu_others_cores.notna()
    by_others = crowded(n.cpu_others_cores, n.cpu_cores, threads)
    by_load = ~measured & (n.load_avg_1m > n.cpu_cores + n.tp)
    if not (busy := by_others | by_load).any():
        return None
    how = []
    if by_others.any():
        how.append(f"other processes kept up to {n.cpu_others_cores[by_others].max():.1f} busy, more than the run's "
                   "own threads left")
    if by_load.any():
        how.append(f"a 1-min load average up to {n.load_avg_1m[by_load].max():.1f}, above the cores plus the run's "
                   "ranks")
    verdicts = ", and step and TPOT verdicts may disagree" if (ok.workload[busy] != "broadcast").any() else ""
    return (f"note: {int(busy.sum())} of {len(ok)} {side + ' ' if side else ''}rows shared the CPUs with other "
            f"work (on {int(n.cpu_cores[busy].min())} cores: {'; or '.join(how)}): their timings are noisy{verdicts}; "
            "measure again on a quiet machine")
