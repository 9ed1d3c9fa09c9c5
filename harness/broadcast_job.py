"""``workload=broadcast``: the control plane alone, no model, one row per payload and repeat."""

from __future__ import annotations

import sys

from omegaconf import DictConfig, OmegaConf

from engine import ConfigError
from runtime.launch import Launch

from .broadcast import BroadcastGroup, run_broadcast
from .job_setup import base_row, check_results_dir, control_options, failed
from .report import SWEEP_ROWS, one_line, print_broadcast, show_progress
from .signals import as_interrupt


def check_broadcast(cfg: DictConfig, launch: Launch | None) -> dict:
    """The broadcast workload as a dict, checked on every rank (its keys, tp >= 2 and control=ideal: up front).
    Raises ConfigError: tp other than torchrun's world size."""
    if launch is not None and cfg.tp != launch.world_size:
        raise ConfigError(f"tp={cfg.tp} but torchrun started WORLD_SIZE={launch.world_size} ranks: they must be equal")
    return OmegaConf.to_container(cfg.workload)


def run_broadcast_job(cfg: DictConfig, launch: Launch | None) -> int:
    """Rank 0: one group for the job, every payload ``repeat`` times; exit code 0, 1 (a failed row), 2, 130."""
    try:
        results = check_results_dir(cfg)
        w = check_broadcast(cfg, launch)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    row0 = {**base_row(cfg, "cpu"), "model": None, "dtype": None}
    try:
        group = BroadcastGroup(cfg.control.name, cfg.tp, control_options(cfg), cfg.llm.timeout_s,
                               cfg.llm.startup_timeout_s, launch)
    except BaseException as e:
        e = as_interrupt(e)
        if isinstance(e, (ConfigError, ValueError)):
            print(f"error: {e}", file=sys.stderr)
            return 2
        return failed(results, row0, 0, e)
    row0.update(group.group.describe())
    r, path = 0, None
    try:
        for r in range(cfg.repeat):
            for result in run_broadcast(w, group, show_progress(cfg.progress)):
                row = {**row0, "repeat": r, "status": "ok", **result}
                path = results.add(row)
                print_broadcast(row, path, w["messages"])
                SWEEP_ROWS.append(row)
        if path:
            print(f"rows appended to {path}")
        return 1 if results.problem else 0
    except BaseException as e:
        e = as_interrupt(e)
        results.add({**row0, "repeat": r, "status": "failed", "error": one_line(e)})
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 130 if isinstance(e, KeyboardInterrupt) else 1
    finally:
        group.close()
