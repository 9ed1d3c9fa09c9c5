"""The control-plane columns computed from per-step samples (harness/metrics.py), on hand-made samples."""

from __future__ import annotations

import pytest

from engine.step_batch import StepRecord
from harness.metrics import launch_lag


def step(is_prefill: bool, launch_ns: int | None) -> StepRecord:
    return StepRecord(is_prefill, 1, 1, 0.002, 20_000, 64, launch_ns)


def test_launch_lag_is_the_slowest_worker_minus_rank0_over_decode_steps():
    steps = [step(True, 100_000), step(False, 50_000), step(False, 60_000), step(False, 70_000)]
    recv = {1: {"ns": [1, 1, 1, 1], "launch_ns": [900_000, 80_000, 70_000, 60_000]},
            2: {"ns": [1, 1, 1, 1], "launch_ns": [0, 90_000, 40_000, 110_000]}}
    row = launch_lag(recv, steps)
    # decode lags: max(80, 90) - 50 = 40 us, max(70, 40) - 60 = 10 us, max(60, 110) - 70 = 40 us; the prefill
    # step (900 us behind) is not a decode step
    assert row["ctrl_launch_lag_us_p50"] == pytest.approx(40.0)
    assert row["ctrl_launch_lag_us_p99"] == pytest.approx(40.0)
    assert row["ctrl_launch_lag_us_mean"] == pytest.approx(30.0)  # (40 + 10 + 40) / 3
    assert row["ctrl_launch_late_us_mean"] == pytest.approx(30.0)  # every step late: the same


def test_a_tail_of_late_steps_shows_in_the_mean_not_the_p50():
    # call 11 on the H200s: lag p50 near 0 us while ring still exposed ~130 us per step; a few late steps
    # move the mean (what TPOT, a mean of steps, absorbs) and leave the median where it was
    n = 100
    steps = [step(False, 1_000_000 * i) for i in range(n)]
    late = {i: 600_000 for i in range(0, n, 5)}  # every fifth step 600 us late, the rest on time
    row = launch_lag({1: {"launch_ns": [1_000_000 * i + late.get(i, 0) for i in range(n)]}}, steps)
    assert row["ctrl_launch_lag_us_p50"] == pytest.approx(0.0)
    assert row["ctrl_launch_lag_us_mean"] == pytest.approx(120.0)


def test_a_worker_ready_before_rank0_gives_a_negative_lag():
    row = launch_lag({1: {"launch_ns": [30_000]}}, [step(False, 50_000)])
    assert row["ctrl_launch_lag_us_p50"] == pytest.approx(-20.0)
    assert row["ctrl_launch_late_us_mean"] == pytest.approx(0.0)


def test_early_steps_do_not_cancel_late_ones_in_the_late_mean():
    # one step 100 us late, one 100 us early: the plain mean says 0, rank 0 still waited 100 us once
    steps = [step(False, 1_000_000), step(False, 2_000_000)]
    row = launch_lag({1: {"launch_ns": [1_100_000, 1_900_000]}}, steps)
    assert row["ctrl_launch_lag_us_mean"] == pytest.approx(0.0)
    assert row["ctrl_launch_late_us_mean"] == pytest.approx(50.0)


@pytest.mark.parametrize("recv, steps", [
    ({1: {"launch_ns": []}}, [step(False, 50_000)]),             # ideal: replayed steps have no send to time
    ({}, [step(False, None)]),                                   # tp=1: no worker, rank 0 sent nothing
    ({1: {"launch_ns": [1, 2]}}, [step(True, 5), step(True, 6)]),  # no decode step
])
def test_no_launch_lag_without_samples(recv, steps):
    assert launch_lag(recv, steps) == {"ctrl_launch_lag_us_mean": None, "ctrl_launch_lag_us_p50": None,
                                       "ctrl_launch_lag_us_p99": None, "ctrl_launch_late_us_mean": None}
