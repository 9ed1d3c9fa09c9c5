"""Shared-memory segments of the control planes, named ``tpcp_<creator pid>_<random>`` (a dead creator's are
stale), and registry segments ``tpcp_<pid>_sems<random>`` listing the named semaphores a plane creates.

All are kept out of multiprocessing's resource tracker, which outlives a SIGKILLed rank 0 and calls what it holds
"leaked" whoever removes it. The creator unlinks once nobody will open them again (:func:`unlink_name`), at
release, or at exit; the workers on its host a dead rank 0's (:func:`remove_segments_of`); the next run those of a
run that died whole (:func:`remove_stale_segments`).
"""

from __future__ import annotations

import _multiprocessing
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


def exited(pid: int) -> bool:
    """``pid`` has ended: gone from /proc, or a zombie (its exit done, only its parent's reaping left)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def remove_segments_of(pid: int) -> list[str]:
    """Unlink every ``tpcp_<pid>_*`` segment, and the semaphores its registries list, of a dead creator ``pid``;
    quietly skips what fails. Returns the names removed."""
    removed = []
    for name in [name for creator, name in _segments() if creator == pid]:
        files = [name]
        if name.split("_")[2].startswith("sems"):  # a registry: the semaphores it lists first
            with contextlib.suppress(OSError), open(os.path.join(SHM_DIR, name), "rb") as f:
                files = ["sem." + sem.lstrip("/") for sem in f.read().rstrip(b"\0").decode().split()] + files
        for file in files:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(SHM_DIR, file))
                removed.append(file)
    return removed


def _segments() -> list[tuple[int, str]]:
    """(creator pid, name) of the ``tpcp_<pid>_<random>`` segments in SHM_DIR ([] when unreadable)."""
    with contextlib.suppress(OSError):
        parts = [(name, name.split("_")) for name in os.listdir(SHM_DIR)]
        return [(int(p[1]), name) for name, p in parts if len(p) == 3 and p[0] == PREFIX and p[1].isdigit()]
    return []


def register_semaphores(semaphores) -> shared_memory.SharedMemory | None:
    """List the named semaphores of multiprocessing objects (``Lock``...) in a registry segment (one name a line,
    zero-padded), taken from the resource tracker; returns it, or None where there is nothing to list or no
    /dev/shm. ``release_segment(registry, unlink=True)``, or this process's exit, unlinks them with it."""
    names = [getattr(getattr(s, "_semlock", None), "name", None) for s in semaphores]
    payload = "".join(n + "\n" for n in names if n).encode()
    if not payload or not os.path.isdir(SHM_DIR):
        return None
    registry = open_segment(f"{PREFIX}_{os.getpid()}_sems{secrets.token_hex(4)}", create=True, size=len(payload))
    registry.buf[:len(payload)] = payload
    # Each one's multiprocessing finalizer, cancelled (its unregister would make the tracker print an error), and
    # unregistered here; one whose finalizer is not found stays the tracker's.
    wanted, cleanup, owned = {(n,) for n in names if n}, getattr(synchronize.SemLock, "_cleanup", None), []
    for finalizer in list(getattr(util, "_finalizer_registry", {}).values()):
        if cleanup is not None and getattr(finalizer, "_callback", None) is cleanup and finalizer._args in wanted:
            owned.append(finalizer._args[0])
            finalizer.cancel()
            resource_tracker.unregister(owned[-1], "semaphore")
    _OWNED[registry.name] = util.Finalize(None, _unlink, args=(registry._name, tuple(owned)), exitpriority=0)
    return registry


def _unlink(segment: str, semaphores: tuple[str, ...] = ()) -> None:
    """Unlink ``segment`` and ``semaphores`` by name, quietly when already gone (never via the tracker)."""
    for sem in semaphores:
        with contextlib.suppress(OSError):
            _multiprocessing.sem_unlink(sem)
    with contextlib.suppress(OSError):
        _posixshmem.shm_unlink(segment)


def open_segment(name: str, create: bool = False, size: int = 0) -> shared_memory.SharedMemory:
    """``SharedMemory(name, create, size)`` kept out of the resource tracker, raising as SharedMemory does (by
    default another process's segment ``name``; FileNotFoundError: no such segment on this host)."""
    try:
        return shared_memory.SharedMemory(name=name, create=create, size=size, track=False)
    except TypeError:  # Python < 3.13: no track argument; the tracker registered it (created or attached)
        shm = shared_memory.SharedMemory(name=name, create=create, size=size)
        resource_tracker.unregister(shm._name, "shared_memory")
        return shm


def create_segment(size: int) -> shared_memory.SharedMemory:
    """A new segment of ``size`` bytes (stale ones removed first), unlinked by :func:`release_segment` or at exit."""
    remove_stale_segments()
    shm = open_segment(f"{PREFIX}_{os.getpid()}_{secrets.token_hex(4)}", create=True, size=size)
    _OWNED[shm.name] = util.Finalize(None, _unlink, args=(shm._name,), exitpriority=0)
    return shm


def unlink_name(shm: shared_memory.SharedMemory | None) -> None:
    """Unlink ``shm`` (a registry: and the semaphores it lists) and keep it mapped: whoever opened it goes on, nobody
    can open it any more. The creator's job, once."""
    if shm is not None:  # through its finalizer (which then never runs again), else by name
        _OWNED.pop(shm.name, partial(_unlink, shm._name))()


def release_segment(shm: shared_memory.SharedMemory | None, unlink: bool) -> None:
    """Close ``shm`` (and unlink it: the creator's job); returns None for ``self.shm = release_segment(...)``."""
    if shm is not None:
        shm.close()
        if unlink:
            unlink_name(shm)
    return None
