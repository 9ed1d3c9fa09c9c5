"""Shared-memory segments of the control planes: created with a per-run unique name, released by their
creator, and removed after a run whose processes all died (nobody was left to unlink them).

Names are ``tpcp_<creator pid>_<random>``: the pid lets a later run on the same host recognise a segment as
stale (its creator no longer exists) without touching a live run's. The named semaphores a plane creates
through multiprocessing (``/dev/shm/sem.mp-*``, names without a pid) are listed in a registry segment of the
same form, ``tpcp_<pid>_sems<random>``, so that they are removed with the dead run's segments too.
"""

from __future__ import annotations

import os
import secrets
from multiprocessing import shared_memory

PREFIX = "tpcp"
MAX_SEGMENT_BYTES = 1 << 30  # a larger segment buys a plane nothing and could exhaust /dev/shm


def remove_stale_segments(directory: str = "/dev/shm") -> list[str]:
    """Unlink ``tpcp_<pid>_*`` segments whose creating process no longer exists. Returns the names removed."""
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        parts = name.split("_")
        if len(parts) != 3 or parts[0] != PREFIX or not parts[1].isdigit():
            continue
        try:
            os.kill(int(parts[1]), 0)
        except ProcessLookupError:
            if parts[2].startswith("sems"):
                removed += _unlink_listed(os.path.join(directory, name), directory)
            try:
                os.unlink(os.path.join(directory, name))
                removed.append(name)
            except OSError:
                pass
        except PermissionError:  # alive, another user's
            pass
    return removed


def _unlink_listed(registry: str, directory: str) -> list[str]:
    """Unlink the semaphores a dead run's registry lists; returns their files' names."""
    removed = []
    try:
        with open(registry, "rb") as f:
            names = f.read().rstrip(b"\0").decode().split()
    except OSError:
        return removed
    for sem in names:
        path = os.path.join(directory, "sem." + sem.lstrip("/"))
        try:
            os.unlink(path)
            removed.append(os.path.basename(path))
        except OSError:
            pass
    return removed


def register_semaphores(semaphores) -> shared_memory.SharedMemory | None:
    """List the named semaphores of multiprocessing objects (``Semaphore``, ``Lock``...) in a registry segment
    ``tpcp_<pid>_sems<random>`` (names separated by newlines, zero-padded); returns it, or None where there is
    nothing to list or no /dev/shm. Being a segment, the resource tracker unlinks it with the semaphores when
    the creator alone dies; :func:`remove_stale_segments` reads it when the tracker died too. Pass it to
    :func:`unregister_semaphores` once the semaphores are released."""
    names = [getattr(getattr(s, "_semlock", None), "name", None) for s in semaphores]
    payload = "".join(n + "\n" for n in names if n).encode()
    if not payload or not os.path.isdir("/dev/shm"):
        return None
    registry = shared_memory.SharedMemory(name=f"{PREFIX}_{os.getpid()}_sems{secrets.token_hex(4)}", create=True,
                                          size=len(payload))
    registry.buf[:len(payload)] = payload
    return registry


def unregister_semaphores(registry: shared_memory.SharedMemory | None) -> None:
    """Remove a registry made by :func:`register_semaphores` (None: nothing to do)."""
    release_segment(registry, unlink=True)


def create_segment(size: int) -> shared_memory.SharedMemory:
    """A new segment of ``size`` bytes named ``tpcp_<pid>_<random>``, after removing the stale segments of
    dead runs."""
    remove_stale_segments()
    return shared_memory.SharedMemory(name=f"{PREFIX}_{os.getpid()}_{secrets.token_hex(4)}", create=True, size=size)


def release_segment(shm: shared_memory.SharedMemory | None, unlink: bool) -> None:
    """Close ``shm`` (and unlink it: the creator's job); returns None for ``self.shm = release_segment(...)``."""
    if shm is not None:
        shm.close()
        if unlink:
            try:
                shm.unlink()
            except FileNotFoundError:
                pass
    return None


def attach_segment(name: str) -> shared_memory.SharedMemory:
    """Open an existing segment created by another process.

    A process spawned by the segment's creator shares the creator's resource tracker, which unlinks the
    segment if every process of the run dies; others (ranks started by torchrun) must keep their own tracker
    out of it, or it would unlink the segment under its creator when the attaching process exits.

    Raises:
        FileNotFoundError: no such segment on this host (e.g. created on another node).
    """
    import multiprocessing as mp

    if mp.parent_process() is not None:
        return shared_memory.SharedMemory(name=name)
    try:
        return shared_memory.SharedMemory(name=name, track=False)
    except TypeError:  # Python < 3.13: no track argument
        shm = shared_memory.SharedMemory(name=name)
        from multiprocessing import resource_tracker

        resource_tracker.unregister(shm._name, "shared_memory")
        return shm
