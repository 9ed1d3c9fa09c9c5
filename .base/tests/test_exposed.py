"""harness.exposed: each plane's decode step and TPOT against control=ideal's, with the repeats' spread."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.exposed import exposed_cost, print_exposed


def rows(control, tpot_ms, workload="latency", send=None, late=None):
    return [{"control": control, "tp": 2, "workload": workload, "tpot_ms_p50": t, "decode_step_ms_p50": t,
             "ctrl_send_us_p50": None if send is None else send[i],
             "ctrl_launch_late_us_mean": None if late is None else late[i]} for i, t in enumerate(tpot_ms)]


@pytest.fixture
def table():
    df = pd.DataFrame(rows("ideal", [1.00, 1.01, 1.02])
                      + rows("ring", [1.05, 1.06, 1.07], send=[15, 17, 19], late=[5, 30, 10])
                      + rows("shm", [1.00, 1.02, 1.03]) + rows("pipe", [0.90, 0.91, 0.92]) + rows("gloo", [1.5])
                      + rows("ring", [2.0, 2.1], workload="bench"))  # no ideal for bench: no rows
    return exposed_cost(df, ["tp", "control", "workload"])


def test_exposed_cost_is_the_median_difference_with_the_repeats_spread_and_a_verdict(table):
    tpot = table[table.metric == "TPOT p50"].set_index("control")
    assert set(table.workload) == {"latency"} and len(table) == 8  # 4 planes x 2 metrics, bench left out
    ring = tpot.loc["ring"]
    assert ring.exposed_us == pytest.approx(50) and ring.exposed_pct == pytest.approx(100 * 0.05 / 1.01)
    assert (ring.low_us, ring.high_us) == (pytest.approx(30), pytest.approx(70)) and ring.verdict == "costs"
    assert ring.repeats == "3/3"
    assert tpot.loc["shm"].verdict == "within noise"  # [1.00 - 1.02, 1.03 - 1.00] contains 0
    assert tpot.loc["pipe"].verdict == "ideal no floor" and tpot.loc["pipe"].exposed_us == pytest.approx(-100)
    assert tpot.loc["gloo"].verdict == "one repeat: no spread"


def test_send_plus_late_mean_is_the_planes_median_and_blank_without_the_columns(table, capsys):
    tpot = table[table.metric == "TPOT p50"].set_index("control")
    assert tpot.loc["ring"].send_late_us == pytest.approx(29)  # medians of 20, 47, 29
    assert math.isnan(tpot.loc["shm"].send_late_us)
    print_exposed(table, "markdown")
    out = capsys.readouterr().out
    assert "exposed cost" in out and "[+30.0, +70.0]" in out and "within noise" in out
    lines = out.splitlines()
    ring = next([c.strip() for c in line.split("|")] for line in lines if "| ring" in line and "TPOT" in line)
    assert "+50.0" in ring and "+4.95" in ring and "29" in ring  # signed differences, then send + late


def test_at_tp_1_no_plane_has_an_exposed_cost():
    """Rank 0 alone sends nothing: a plane beside ideal there is noise (a new user saw shm "costs +1584%")."""
    tp1 = [{**r, "tp": 1} for r in rows("ideal", [1.0, 1.0]) + rows("shm", [3.0, 3.1])]
    table = exposed_cost(pd.DataFrame(tp1 + rows("ideal", [1.0, 1.0]) + rows("shm", [1.2, 1.3])), ["tp", "control"])
    assert set(table.tp) == {2} and len(table) == 2


def test_no_ideal_rows_no_table(capsys):
    empty = exposed_cost(pd.DataFrame(rows("ring", [1.0, 1.1])), ["tp", "control", "workload"])
    assert empty.empty
    print_exposed(empty)
    assert capsys.readouterr().out == ""


def test_plane_options_name_a_variant_and_ideals_inner_plane_still_pairs():
    """Session-7 break test: under torchrun ideal runs with control.options.inner=hybrid, which landed in the
    overrides column, so no plane ever paired with it (no exposed cost at all)."""
    def with_overrides(rs, text):
        return [{**r, "overrides": text} for r in rs]

    df = pd.DataFrame(with_overrides(rows("ideal", [1.00, 1.01, 1.02]), "control.options.inner=hybrid llm.x=1")
                      + with_overrides(rows("hybrid", [1.05, 1.06, 1.07]), "llm.x=1")
                      + with_overrides(rows("hybrid", [1.10, 1.11, 1.12]), "control.options.spin_us=0 llm.x=1"))
    table = exposed_cost(df, ["tp", "control", "workload", "overrides"])
    tpot = table[table.metric == "TPOT p50"].set_index("control")
    assert set(tpot.index) == {"hybrid", "hybrid control.options.spin_us=0"} and set(tpot.overrides) == {"llm.x=1"}
    assert tpot.loc["hybrid control.options.spin_us=0"].exposed_us == pytest.approx(100)
