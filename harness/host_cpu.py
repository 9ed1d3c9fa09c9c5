"""How busy other processes kept the host's CPUs during a timed run (``cpu_others_cores``): the busy time in
/proc/stat minus the run's own processes' (/proc/<pid>/stat, the launcher's tree), over the wall time, in cores.
The 1-min load average cannot say this: it lags a minute behind and counts the run's own ranks. Linux only."""

from __future__ import annotations

import os
import time

TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
CROWDED_CORES = 0.25  # other processes' load under this much is the machine's own noise, never flagged


def busy_ticks() -> int:
    """The host's CPU time spent out of idle since boot, all CPUs (ticks): user, nice, system, irq, softirq, steal."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    return user + nice + system + irq + softirq + steal


def tree_ticks(root: int) -> int:
    """CPU time (ticks) of ``root`` and every process below it, their threads and reaped children included."""
    parent, ticks = {}, {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        except (OSError, IndexError):  # gone meanwhile
            continue
        parent[int(name)] = int(fields[1])
        ticks[int(name)] = sum(map(int, fields[11:15]))  # utime, stime, cutime, cstime
    mine, todo = set(), [root]
    while todo:
        pid = todo.pop()
        mine.add(pid)
        todo += [p for p, pp in parent.items() if pp == pid and p not in mine]
    return sum(ticks.get(pid, 0) for pid in mine)


def run_root() -> int:
    """The process whose tree holds this run's ranks on this host: this one, or under torchrun (a rank, child of
    its agent) the agent's parent, so that simulated nodes' agents and ranks count as the run's own."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return os.getpid()
    with open(f"/proc/{os.getppid()}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


class OtherCpu:
    """``with OtherCpu() as c: ...`` then ``c.cores``: the mean number of cores other processes kept busy during
    the block (float, >= 0), or None where /proc cannot be read. ``root``: the run's process tree (``run_root``)."""

    def __init__(self, root: int | None = None):
        self.root, self.cores, self._start = root, None, None

    def _read(self) -> tuple[float, int, int] | None:
        try:
            return time.monotonic(), busy_ticks(), tree_ticks(self.root)
        except (OSError, ValueError):
            return None

    def __enter__(self) -> OtherCpu:
        self.root = self.root or run_root()
        self._start = self._read()
        return self

    def __exit__(self, *exc) -> None:
        end = self._read()
        if self._start is not None and end is not None and end[0] > self._start[0]:
            others = (end[1] - self._start[1]) - (end[2] - self._start[2])
            self.cores = round(max(0.0, others / TICKS_PER_S / (end[0] - self._start[0])), 2)


def crowded(others, cores, demand):
    """Whether other processes' ``others`` cores and the run's own ``demand`` (its ranks' threads) exceed the
    host's ``cores``: scalars or pandas Series alike (NaN: False)."""
    return (others >= CROWDED_CORES) & (others + demand > cores)


def busy_note(df, side: str = "") -> str | None:
    """A line when ok rows (of ``side``, the gate's OLD or NEW) shared the CPUs with other work: other processes
    kept ``cpu_others_cores`` busy during the timed run, more than the cores the run's own threads left
    (``crowded``); rows before schema 12 by their 1-min load average at the job's start above the cores plus
    the run's ranks (a sweep's previous job, ranks like these, is still in that average)."""
    ok = df[df.status == "ok"]
    threads = ok.tp * ok.cpu_threads.where(ok.device == "cpu").fillna(1)
    measured = ok.cpu_others_cores.notna()
    busy = crowded(ok.cpu_others_cores, ok.cpu_cores, threads) | ~measured & (ok.load_avg_1m > ok.cpu_cores + ok.tp)
    if not busy.any():
        return None
    verdicts = ", and step and TPOT verdicts may disagree" if (ok.workload[busy] != "broadcast").any() else ""
    how = []
    if (busy & measured).any():
        how.append(f"other processes kept up to {ok.cpu_others_cores[busy].max():.1f} cores busy")
    if (busy & ~measured).any():
        how.append(f"1-min load average up to {ok.load_avg_1m[busy & ~measured].max():.1f}")
    return (f"note: {int(busy.sum())} of {len(ok)} {side + ' ' if side else ''}rows shared the CPUs with other work "
            f"({' or '.join(how)} on {int(ok.cpu_cores[busy].min())} cores, beyond what the run's own threads leave): "
            f"their timings are noisy{verdicts}; measure again on a quiet machine")
