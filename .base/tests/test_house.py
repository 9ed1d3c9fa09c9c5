"""The house's shape (issue 29): layers import one way, no import cycles, small files and functions."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = ("common", "backends", "runtime", "engine", "harness")  # each may import only those before it
FORBIDDEN = {"engine": {"hydra", "omegaconf"}}  # the engine knows nothing of Hydra
MAX_FILE_LINES, MAX_FUNCTION_LINES = 300, 59


def _sources() -> dict[str, ast.Module]:
    """{module name: its parsed source} for every module of the layers."""
    out = {}
    for layer in LAYERS:
        for folder, _, names in os.walk(os.path.join(ROOT, layer)):
            for name in names:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    mod = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")
                    with open(path) as f:
                        out[mod] = (ast.parse(f.read()), path)
    return out


SOURCES = _sources()


def _imports(mod: str, tree: ast.Module) -> set[str]:
    """Every module name ``mod`` imports, at any depth of its code, relative imports made absolute."""
    package = mod if SOURCES[mod][1].endswith("__init__.py") else mod.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
    return out


def test_layers_import_only_downward():
    wrong = []
    for mod, (tree, _) in SOURCES.items():
        layer = mod.split(".")[0]
        above = set(LAYERS[LAYERS.index(layer) + 1:]) | FORBIDDEN.get(layer, set())
        wrong += [f"{mod} imports {name}" for name in _imports(mod, tree) if name.split(".")[0] in above]
    assert not wrong


def test_no_import_cycles():
    graph = {mod: {n for n in _imports(mod, tree) if n in SOURCES and n != mod} for mod, (tree, _) in SOURCES.items()}
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(mod: str, path: list[str]) -> list[str] | None:
        state[mod] = 1
        for dep in sorted(graph[mod]):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (cycle := visit(dep, path + [dep])):
                return cycle
        state[mod] = 2
        return None

    for mod in sorted(graph):
        if mod not in state:
            cycle = visit(mod, [mod])
            assert cycle is None, " -> ".join(cycle)


def test_files_and_functions_stay_small():
    big = []
    for tree, path in SOURCES.values():
        with open(path) as f:
            lines = sum(1 for _ in f)
        big += [f"{path}: {lines} lines"] if lines > MAX_FILE_LINES else []
        big += [f"{path}: {n.name} has {n.end_lineno - n.lineno + 1} lines" for n in ast.walk(tree)
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert not big


@pytest.mark.slow
def test_starting_a_process_does_not_import_torch_dynamo():
    """Every rank imports the engine at start-up; torch._dynamo (pulled in by torch.nn.attention.varlen) cost 1.6 s
    of each process's start on a 2-core CPU, ~30% of a tp=2 smoke run. Only CUDA's prefill needs it, at first use."""
    code = ("import sys, harness.__main__, harness.app, runtime.worker, engine.model_runner; "
            "print(sorted(m for m in sys.modules if m.startswith('torch._dynamo'))[:3])")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stdout + res.stderr[-1000:]


def test_the_fast_lane_refuses_a_python_process():
    """conftest.py keeps the slow marker's definition: outside it no worker, harness or script starts."""
    import multiprocessing

    with pytest.raises(AssertionError, match="mark it slow"):
        subprocess.run([sys.executable, "-c", "pass"])
    with pytest.raises(AssertionError, match="mark it slow"):
        multiprocessing.get_context("spawn").Process(target=print).start()
    assert subprocess.run(["git", "--version"], capture_output=True).returncode == 0  # other tools are fine
