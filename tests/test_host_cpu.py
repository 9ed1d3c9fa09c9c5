"""``cpu_others_cores``: what other processes took of the host's CPUs during a timed run (harness/host_cpu.py).
The new-user trial (session 38): runs beside a test suite on 2 cores ran 10x slower and were not flagged, since
the 1-min load average, read at the job's start, stayed under the cores plus the run's ranks."""

import os
import subprocess
import time

import pandas as pd
import pytest

from harness.host_cpu import OtherCpu, crowded


def test_the_time_outside_the_run_s_tree_is_the_others():
    """Two windows over one spin: with this process outside the run's tree (a sleeper's), its own CPU time is the
    others'; inside it, it is not. The difference is this process's CPU time, whatever else the host runs."""
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        outside, inside = OtherCpu(root=sleeper.pid), OtherCpu(root=os.getpid())
        with outside, inside:
            cpu0, wall0 = time.process_time(), time.monotonic()
            while time.monotonic() - wall0 < 1.0:
                pass
            mine = (time.process_time() - cpu0) / (time.monotonic() - wall0)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert inside.cores is not None and inside.cores >= 0 and mine > 0.2
    assert outside.cores - inside.cores == pytest.approx(mine, abs=0.1)


def test_crowded_is_others_beyond_the_cores_the_run_leaves():
    assert crowded(1.0, 2, 2) and not crowded(1.0, 2, 1) and not crowded(0.2, 2, 2)  # 0.2: the host's own noise
    others = pd.Series([1.0, float("nan"), 0.5])
    assert crowded(others, pd.Series([2, 2, 16]), pd.Series([2, 2, 2])).tolist() == [True, False, False]
