"""Control-plane backends, found by name: ``backends/<name>.py`` defines ``CONTROL_PLANE``, a ControlPlane."""

from __future__ import annotations

import importlib
import pkgutil

from .base import EXIT, HOST, SPAWN, ControlContext, ControlPlane, ControlPlaneError, PeerGone, WorkerEndpoint


def available() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__)
                  if not m.name.startswith("_") and m.name not in ("base", "segments"))  # helpers, not planes


def get_control_plane(name: str) -> type[ControlPlane]:
    """The ControlPlane class registered as ``name``. Raises ValueError (listing the known ones) for another."""
    if name not in available():
        raise ValueError(f"unknown control plane {name!r}; available: {', '.join(available())}")
    return importlib.import_module(f"{__name__}.{name}").CONTROL_PLANE


def scope_fits(scope: str, launcher: str, num_nodes: int) -> bool:
    """Whether a plane of ``scope`` works for ranks started by ``launcher`` ("spawn" or "torchrun") on
    ``num_nodes`` nodes: SPAWN-scoped planes only under spawn, HOST-scoped ones only on one node."""
    return not ((scope == SPAWN and launcher != "spawn") or (scope in (SPAWN, HOST) and num_nodes > 1))


def planes_for(launcher: str, num_nodes: int) -> list[str]:
    """The registered planes that work (with their default options) in that layout (``scope_fits``)."""
    return [n for n in available() if scope_fits(get_control_plane(n).scope_of({}), launcher, num_nodes)]


__all__ = ["EXIT", "HOST", "SPAWN", "ControlContext", "ControlPlane", "ControlPlaneError", "PeerGone", "WorkerEndpoint",
           "available", "get_control_plane", "planes_for", "scope_fits"]
