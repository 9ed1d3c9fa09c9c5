"""One engine kept between a sweep's jobs (one process runs them in turn): a job reuses it when every setting
but ``llm.async_scheduling`` is equal, saving 10-60 s; each timed pass starts from ``LLM.reset()``, so it
measures what a fresh one would. Hydra varies the last override fastest: name control, tp and model first.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from engine import LLM

_kept: tuple[str, LLM] | None = None


def engine_key(**settings) -> str:
    """A key of everything that shapes an engine (``async_scheduling`` left out by the caller)."""
    return json.dumps(settings, sort_keys=True, default=str)


def get_engine(key: str, make: Callable[[], LLM], reuse: bool) -> tuple[LLM, bool]:
    """(the kept engine when ``reuse`` and its key is ``key``, else ``make()`` after releasing it; reused)."""
    global _kept
    if reuse and _kept is not None and _kept[0] == key and not _kept[1]._closed:
        return _kept[1], True
    release()
    llm = make()
    _kept = (key, llm)
    return llm, False


def release() -> None:
    """Shut the kept engine down (after a failed job, when reuse is off, at the end of the sweep)."""
    global _kept
    if _kept is not None:
        _kept, (_, llm) = None, _kept
        llm.shutdown()
