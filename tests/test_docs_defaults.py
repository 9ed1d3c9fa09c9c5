"""The defaults the docs state are the configuration's: docs/REFERENCE.md's workload-keys table, and every "(N unit
by default)" after a backticked key in the README and docs/, against the composed config (session 41: the broadcast
cap read 512 KiB where the config held 1 GiB)."""

from __future__ import annotations

import os
import re
import shlex

import pytest
import torch
from helpers import ROOT

from harness.conf_paths import group_options
from harness.preflight import check_command, hydra_compose

REFERENCE = open(os.path.join(ROOT, "docs", "REFERENCE.md")).read()
DOCS_BY_FILE = [open(os.path.join(ROOT, *p)).read() for p in [("README.md",)] + [
    ("docs", f) for f in sorted(os.listdir(os.path.join(ROOT, "docs"))) if f.endswith(".md")]]
DOCS = " ".join(DOCS_BY_FILE)
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


def doc_commands() -> list[tuple[str, list[str]]]:
    """(the doc line, its overrides) of every ``python -m harness`` / ``torchrun ... -m harness`` command in the
    README and docs/: code-block lines and inline code, without placeholders (``...``, ``<x>``, ``[x]``,
    ``/path/to``) or shell substitutions."""
    found = []
    for text in DOCS_BY_FILE:
        blocks = re.findall(r"```\w*\n(.*?)```", text, re.S)
        lines = [ln.split(" #")[0] for b in blocks for ln in b.replace("\\\n", " ").splitlines()]
        lines += re.findall(r"`([^`\n]*-m harness [^`\n]*)`", re.sub(r"```.*?```", "", text, flags=re.S))
        for line in lines:
            if (m := re.search(r"-m harness( .*)?$", line.strip())) and not any(
                    mark in line for mark in ("...", "<", "[overrides]", "/path/to", "$")):
                found.append((line.strip(), shlex.split(m.group(1) or "")))
    return found


@pytest.mark.slow  # ~10 s: 13 commands, 29 jobs composed
def test_every_harness_command_in_the_docs_passes_the_harness_checks(monkeypatch):
    """Session 47's docs audit: REFERENCE's two-node example asked tp=16 of Qwen3-8B, whose 8 KV heads it does not
    divide, so the harness refused it. Every documented command composes and passes the checks, as if on 8 GPUs."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    commands = doc_commands()
    assert len(commands) >= 12, commands  # the docs were parsed
    problems = [(line, check_command(argv)[0]) for line, argv in commands]
    assert not [p for p in problems if p[1]], problems
