"""Ctrl-C, SIGTERM and SIGHUP stop a run the same orderly way, and are reported as an interruption even when
a C extension swallowed the ``KeyboardInterrupt``.

Python raises ``KeyboardInterrupt`` wherever the signal lands. Inside safetensors or torch's C code it can
surface as an unrelated error instead (seen: ``ValueError: could not determine the shape of object type
'torch.storage.UntypedStorage'`` while a shard loaded), which would be reported as bad input (exit 2, no
row). The handler therefore records each signal, and :func:`as_interrupt` turns any failure that follows one
into the interruption it is.
"""

from __future__ import annotations

import os
import signal

_RECEIVED: list[str] = []  # names of the signals received by this process, in order


def _interrupt(signum, frame):
    name = signal.Signals(signum).name
    _RECEIVED.append(name)
    raise KeyboardInterrupt(name)


def install() -> None:
    """Route SIGINT, SIGTERM and SIGHUP to :func:`_interrupt` (main thread only). A shell starts background
    jobs with SIGINT ignored and Python keeps an inherited SIG_IGN: the run would then ignore Ctrl-C; it is
    re-armed here so that the run always stops, unlinks its segments and writes its failed row."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)


def as_interrupt(e: BaseException) -> BaseException:
    """``e``, or a ``KeyboardInterrupt`` naming the first signal received when one arrived before ``e``
    was handled: a failure after a stop signal is that signal's doing, whatever type it surfaced as. Not a
    worker's failure under torchrun (:func:`from_torchrun_agent`): there the SIGTERM came because of it."""
    if isinstance(e, KeyboardInterrupt) or not _RECEIVED:
        return e
    if from_torchrun_agent() and type(e).__name__ == "WorkerError":
        return e
    return KeyboardInterrupt(_RECEIVED[0])


def from_torchrun_agent() -> bool:
    """Whether the first stop signal was a SIGTERM under torchrun, whose agent sends one to every rank of
    its node as soon as one rank dies: then a dead worker, if there is one, is the cause to report."""
    return bool(_RECEIVED) and _RECEIVED[0] == "SIGTERM" and "TORCHELASTIC_RUN_ID" in os.environ
