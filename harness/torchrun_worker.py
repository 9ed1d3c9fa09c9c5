"""Ranks other than 0 under torchrun: check the configuration as rank 0 does (bad input: one line, exit 2,
before any collective), then serve rank 0's run (``runtime/worker.py``)."""

from __future__ import annotations

import sys

from omegaconf import DictConfig

from engine import ConfigError, EngineConfig, serve_worker
from runtime.launch import Launch
from runtime.worker import serve

from .broadcast import broadcast_worker, check_broadcast
from .job_setup import engine_settings, prepare, resolve_device


def run_worker_rank(cfg: DictConfig, launch: Launch) -> int:
    """Returns this rank's exit code: 0 after rank 0's exit message, 1 on a failure (reported to rank 0),
    2 on bad input (here, or refused by rank 0)."""
    try:
        if cfg.workload.get("kind") == "broadcast":
            check_broadcast(cfg, launch)
            return serve(launch, broadcast_worker, (cfg.tp, cfg.llm.timeout_s), cfg.llm.startup_timeout_s)
        if cfg.engine != "tp":
            raise ConfigError("engine=hf runs on one device: do not launch it with torchrun")
        device = resolve_device(cfg.device)
        _, path, _ = prepare(cfg, device, results=False)
        settings, _ = engine_settings(cfg, path, device)
        config = EngineConfig(**settings)
    except (ConfigError, ValueError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return serve_worker(config)
