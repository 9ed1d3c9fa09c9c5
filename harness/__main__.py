"""``python -m harness [overrides]``: the Hydra entry point (``-m`` for multirun sweeps)."""

from __future__ import annotations

import os
import signal
import sys

import hydra
from omegaconf import DictConfig

CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")
GROUPS = ("control", "model", "workload")


def check_overrides(argv: list[str]) -> str | None:
    """One-line message for an override Hydra would reject verbosely (unknown group option, tp < 1),
    or None. Runs before Hydra so bad input fails fast and plainly."""
    for arg in argv:
        key, sep, value = arg.lstrip("+~").partition("=")
        if not sep:
            continue
        values = [v.strip() for v in value.split(",")] if "," in value else [value]
        if key in GROUPS:
            known = sorted(f[:-5] for f in os.listdir(os.path.join(CONF_DIR, key)) if f.endswith(".yaml"))
            bad = [v for v in values if v not in known]
            if bad:
                return f"unknown {key} {bad[0]!r}; available: {', '.join(known)}"
        if key == "tp":
            for v in values:
                if not v.lstrip("-").isdigit() or int(v) < 1:
                    return f"tp must be an integer >= 1, got {v!r}"
    return None


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from .app import run_job

    code = run_job(cfg)
    if code:
        sys.exit(code)


def _terminate(signum, frame):
    """SIGTERM takes the same orderly path as Ctrl-C: workers stopped, segments unlinked, row written."""
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminate)
    problem = check_overrides(sys.argv[1:])
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    main()
