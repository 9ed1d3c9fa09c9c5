"""The defaults the docs state are the configuration's: docs/REFERENCE.md's workload-keys table, and every "(N unit
by default)" after a backticked key in the README and docs/, against the composed config (session 41: the broadcast
cap read 512 KiB where the config held 1 GiB)."""

from __future__ import annotations

import os
import re

import pytest
from helpers import ROOT

from harness.conf_paths import group_options
from harness.preflight import hydra_compose

REFERENCE = open(os.path.join(ROOT, "docs", "REFERENCE.md")).read()
DOCS = " ".join(open(os.path.join(ROOT, *p)).read() for p in [("README.md",)] + [
    ("docs", f) for f in sorted(os.listdir(os.path.join(ROOT, "docs"))) if f.endswith(".md")])
UNITS = {"s": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


@pytest.fixture(scope="module")
def workloads() -> dict:
    """Every workload preset, composed as the harness composes it: name -> its ``workload`` node."""
    with hydra_compose() as compose:
        return {w: compose([f"workload={w}"]) for w in group_options("workload")}


def table_rows(heading: str) -> list[list[str]]:
    """The cells of each body row of the first table under ``## heading`` in docs/REFERENCE.md."""
    table = REFERENCE.split(f"## {heading}", 1)[1].split("\n\n", 2)[2].split("\n\n")[0]
    return [row.split("|")[1:-1] for row in table.splitlines()[2:]]


def table_claims():
    """(keys, workload, stated values) of each ``name (v1, v2)`` cell of the workload-keys table."""
    for keys_cell, defaults_cell, _ in table_rows("Workload keys"):
        keys = re.findall(r"`([\w.]+)", keys_cell)
        for names, values in re.findall(r"((?:[\w-]+, )*[\w-]+) \(([^)]*)\)", defaults_cell):
            for name in names.split(", "):
                yield keys, name, [v.strip() for v in values.split(",")]


def test_the_workload_keys_table_states_the_presets_defaults(workloads):
    checked = 0
    for keys, name, values in table_claims():
        if name not in workloads:  # "every engine workload (true)"
            continue
        for key, value in zip(keys, values, strict=False):
            assert str(workloads[name].workload[key]).lower() == value.lower(), (name, key, value)
            checked += 1
    assert checked >= 20  # the table was parsed


def test_every_stated_default_with_a_unit_is_the_configs(workloads):
    claims = re.findall(r"`([\w.]+)`[^`(]*\((\d+) (s|KiB|MiB|GiB) by default\)", DOCS.replace("\n", " "))
    assert len(claims) >= 3, claims
    for key, number, unit in claims:
        broadcast = workloads["broadcast"].workload
        value = broadcast[key] if key in broadcast else workloads["bench"].llm[key.removeprefix("llm.")]
        assert value == int(number) * UNITS[unit], (key, number, unit, value)


def test_the_control_plane_options_table_is_every_planes_options():
    """Each row's default is the option's in the composed ``control=<plane>``, and the table lists every option."""
    stated = {}
    for cells in table_rows("Control-plane options"):
        planes, option, default = (cell.strip().strip("`") for cell in cells[:3])
        stated.update({(plane, option): default for plane in planes.split(", ")})
    with hydra_compose() as compose:
        options = {(plane, k): f"{v:g}" if isinstance(v, float) else str(v) for plane in group_options("control")
                   for k, v in compose([f"control={plane}"]).control.options.items()}
    assert {k: v for k, v in options.items() if k[1] != "inner_options"} == stated
