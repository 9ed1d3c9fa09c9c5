"""Shared-memory segments of the control planes, named ``tpcp_<creator pid>_<random>``: the pid lets a later
run recognise a segment as stale (its creator is gone). The named semaphores a plane creates through
multiprocessing are listed in a registry segment ``tpcp_<pid>_sems<random>``, so they go with the segments.

They are kept out of multiprocessing's resource tracker, which outlives a SIGKILLed rank 0 and calls what it
holds "leaked" on stderr whoever removes it. Instead the creator unlinks at release (or exit), spawned workers
unlink a dead rank 0's (:func:`remove_segments_of`), and the next run those of a run that died whole
(:func:`remove_stale_segments`).
"""

from __future__ import annotations

import _posixshmem
import contextlib
import os
import secrets
from functools import partial
from multiprocessing import resource_tracker, shared_memory, synchronize, util

PREFIX = "tpcp"
SHM_DIR = "/dev/shm"
MAX_SEGMENT_BYTES = 1 << 30  # a larger segment buys a plane nothing and could exhaust /dev/shm
_OWNED: dict[str, util.Finalize] = {}  # segment name -> what unlinks it (and its listed semaphores), once


def remove_stale_segments() -> list[str]:
    """Unlink the segments of creators that no longer exist (and the semaphores listed); returns the names."""
    removed = []
    for pid in sorted({pid for pid, _ in _segments()}):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            removed += remove_segments_of(pid)
        except PermissionError:  # alive, another user's
            pass
    return removed


def remove_segments_of(pid: int) -> list[str]:
    """Unlink every ``tpcp_<pid>_*`` segment and the semaphores its registries list, for a creator ``pid``
    known to be dead (a spawned worker's rank 0 that is gone, not yet reaped). Returns the names removed."""
    removed = []
    for creator, name in _segments():
        if creator == pid:
            if name.split("_")[2].startswith("sems"):  # a registry: the semaphores it lists first
                with contextlib.suppress(OSError), open(os.path.join(SHM_DIR, name), "rb") as f:
                    sems = f.read().rstrip(b"\0").decode().split()
                    removed += _unlink_files(["sem." + sem.lstrip("/") for sem in sems])
            removed += _unlink_files([name])
    return removed


def _segments() -> list[tuple[int, str]]:
    """(creator pid, name) of the ``tpcp_<pid>_<random>`` segments in SHM_DIR ([] when unreadable)."""
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return []
    parts = [(name, name.split("_")) for name in names]
    return [(int(p[1]), name) for name, p in parts if len(p) == 3 and p[0] == PREFIX and p[1].isdigit()]


def _unlink_files(names: list[str]) -> list[str]:
    """Unlink ``names`` in SHM_DIR, quietly skipping those that fail; returns those unlinked."""
    removed = []
    for name in names:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(SHM_DIR, name))
            removed.append(name)
    return removed


def register_semaphores(semaphores) -> shared_memory.SharedMemory | None:
    """List the named semaphores of multiprocessing objects (``Semaphore``, ``Lock``...) in a registry segment
    (names separated by newlines, zero-padded); returns it, or None where there is nothing to list or no
    /dev/shm. The semaphores are taken from the resource tracker and their own finalizers:
    ``release_segment(registry, unlink=True)``, or this process's exit, unlinks them with the registry."""
    names = [getattr(getattr(s, "_semlock", None), "name", None) for s in semaphores]
    payload = "".join(n + "\n" for n in names if n).encode()
    if not payload or not os.path.isdir(SHM_DIR):
        return None
    registry = _untracked(f"{PREFIX}_{os.getpid()}_sems{secrets.token_hex(4)}", create=True, size=len(payload))
    registry.buf[:len(payload)] = payload
    owned = [n for n in names if n and _take_over_semaphore(n)]
    _OWNED[registry.name] = util.Finalize(None, _unlink, args=(registry._name, tuple(owned)), exitpriority=0)
    return registry


def _take_over_semaphore(name: str) -> bool:
    """Take the named semaphore ``name`` (created by this process) from the resource tracker: cancel the
    finalizer multiprocessing gave it (it would unregister it from the tracker, which then prints an error)
    and unregister it. False, and nothing changed, where that finalizer cannot be found."""
    registry, cleanup = getattr(util, "_finalizer_registry", {}), getattr(synchronize.SemLock, "_cleanup", None)
    for finalizer in list(registry.values()):
        if cleanup is not None and getattr(finalizer, "_callback", None) is cleanup and finalizer._args == (name,):
            finalizer.cancel()
            resource_tracker.unregister(name, "semaphore")
            return True
    return False


def _unlink(segment: str, semaphores: tuple[str, ...] = ()) -> None:
    """Unlink ``segment`` and ``semaphores`` by name, quietly when already gone (never via the tracker)."""
    import _multiprocessing

    for sem in semaphores:
        with contextlib.suppress(OSError):
            _multiprocessing.sem_unlink(sem)
    with contextlib.suppress(OSError):
        _posixshmem.shm_unlink(segment)


def _untracked(name: str, create: bool, size: int = 0) -> shared_memory.SharedMemory:
    """``SharedMemory(name, create, size)`` kept out of multiprocessing's resource tracker. Raises
    FileNotFoundError: (``create=False``) no such segment; FileExistsError: (``create=True``) one exists."""
    try:
        return shared_memory.SharedMemory(name=name, create=create, size=size, track=False)
    except TypeError:  # Python < 3.13: no track argument; the tracker registered it (created or attached)
        shm = shared_memory.SharedMemory(name=name, create=create, size=size)
        resource_tracker.unregister(shm._name, "shared_memory")
        return shm


def create_segment(size: int) -> shared_memory.SharedMemory:
    """A new segment of ``size`` bytes named ``tpcp_<pid>_<random>``, after removing the stale segments of
    dead runs. Unlinked by :func:`release_segment` (``unlink=True``), else at this process's exit."""
    remove_stale_segments()
    shm = _untracked(f"{PREFIX}_{os.getpid()}_{secrets.token_hex(4)}", create=True, size=size)
    _OWNED[shm.name] = util.Finalize(None, _unlink, args=(shm._name,), exitpriority=0)
    return shm


def release_segment(shm: shared_memory.SharedMemory | None, unlink: bool) -> None:
    """Close ``shm`` (and unlink it: the creator's job); returns None for ``self.shm = release_segment(...)``."""
    if shm is not None:
        shm.close()
        if unlink:  # through its finalizer (which then never runs again), else by name
            _OWNED.pop(shm.name, partial(_unlink, shm._name))()
    return None


def attach_segment(name: str) -> shared_memory.SharedMemory:
    """Open an existing segment created by another process, kept out of this process's resource tracker
    (which at exit would unlink it under its creator, or call it leaked). Raises FileNotFoundError: no such
    segment on this host (e.g. created on another node)."""
    return _untracked(name, create=False)
