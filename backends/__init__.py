"""Control-plane backends, found by name: ``backends/<name>.py`` defines ``CONTROL_PLANE``, a
:class:`backends.base.ControlPlane` subclass. Adding a backend is one file here (plus its Hydra yaml)."""

from __future__ import annotations

import importlib
import pkgutil

from .base import EXIT, ControlPlane, ControlPlaneError, PeerGone, WorkerEndpoint

_NOT_BACKENDS = {"base"}


def available() -> list[str]:
    """Names of every registered backend, sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__)
                  if not m.name.startswith("_") and m.name not in _NOT_BACKENDS)


def get_control_plane(name: str) -> type[ControlPlane]:
    """The ControlPlane class registered as ``name``.

    Raises:
        ValueError: no backend of that name (the message lists the known ones).
    """
    if name not in available():
        raise ValueError(f"unknown control plane {name!r}; available: {', '.join(available())}")
    return importlib.import_module(f"{__name__}.{name}").CONTROL_PLANE


__all__ = ["EXIT", "ControlPlane", "ControlPlaneError", "PeerGone", "WorkerEndpoint",
           "available", "get_control_plane"]
