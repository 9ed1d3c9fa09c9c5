"""One engine kept between a sweep's jobs: a job reuses it when every setting but ``llm.async_scheduling`` is
equal (each timed pass starts from ``LLM.reset()``). Hydra varies the last override fastest: name control first."""

from __future__ import annotations

import json

from engine import LLM

_kept: tuple[str, LLM] | None = None


def get_engine(settings: dict, reuse: bool) -> tuple[LLM, bool]:
    """(the kept engine if ``reuse`` and it was made of the same ``settings``, else ``LLM(**settings)``; reused)."""
    global _kept
    key = json.dumps(settings, sort_keys=True, default=str)
    if reuse and _kept is not None and _kept[0] == key and not _kept[1]._closed:
        return _kept[1], True
    release()
    _kept = (key, LLM(**settings))
    return _kept[1], False


def release() -> None:
    """Shut the kept engine down (after a failed job, when reuse is off, at the end of the sweep)."""
    global _kept
    if _kept is not None:
        _kept, (_, llm) = None, _kept
        llm.shutdown()
