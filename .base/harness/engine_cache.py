"""One engine kept between a sweep's jobs: a job reuses it when every setting but ``llm.async_scheduling`` is
equal (each timed pass starts from ``LLM.reset()``). Hydra varies the last override fastest: name control first."""

from __future__ import annotations

import json
import sys

from common import first_line
from engine import LLM, WorkerError

_KEPT: dict[str, LLM] = {}  # at most one engine, by its settings (JSON)


def get_engine(settings: dict, reuse: bool) -> tuple[LLM, bool]:
    """(the kept engine if ``reuse`` and it was made of the same ``settings``, else ``LLM(**settings)``; reused)."""
    key = json.dumps(settings, sort_keys=True, default=str)
    if reuse and key in _KEPT and not _KEPT[key]._closed:
        try:
            _KEPT[key].check_workers()
            return _KEPT[key], True
        except WorkerError as e:  # it died between the jobs: this job is not to fail for it
            print(f"  the previous job's engine lost a worker since ({first_line(e)}): starting a new one",
                  file=sys.stderr)
    release()
    llm = _KEPT[key] = LLM(**settings)
    return llm, False


def release() -> None:
    """Shut the kept engine down (after a failed job, when reuse is off, at the end of the sweep)."""
    if _KEPT:
        _KEPT.popitem()[1].shutdown()
