"""One engine kept between the jobs of a sweep (Hydra runs a sweep's jobs one after another in one process).

A job reuses the engine the previous job left when everything that shapes the engine is equal: checkpoint,
tp, control plane and its options, device, dtype, seed and every ``llm.*`` setting except
``async_scheduling``, which the engine reads at each step and so can change between jobs. Starting an
engine (spawning workers, loading shards, compiling, capturing CUDA graphs) takes 10-60 s; a sweep over
workloads or async scheduling then pays it once per engine instead of once per job. Every timed pass
starts from ``LLM.reset()`` (cold prefix cache, reseeded sampling), so a reused engine measures what a
fresh one would. Hydra's sweep order varies the last override fastest: name control, tp and model first.
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
    """The kept engine when ``reuse`` and its key equals ``key``, else a new one from ``make()`` (the kept
    one shut down first). Returns (engine, reused)."""
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
