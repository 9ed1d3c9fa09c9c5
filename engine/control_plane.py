"""Building the run's control plane for where its ranks are (one host or several, spawned or not)."""

from __future__ import annotations

from backends import ControlContext, get_control_plane, planes_for, scope_fits

from .config import ConfigError


def make_control_plane(name: str, options: dict, world_size: int, timeout_s: float, context: ControlContext):
    """The control plane ``name`` with ``options`` for ranks placed as ``context`` says.

    Raises:
        ConfigError: the plane cannot work there (one line naming the planes that can): a plane whose
            worker ends must be inherited, under torchrun; a shared-memory plane, across nodes.
            Also a bad option (the plane's ValueError).
    """
    try:
        cls = get_control_plane(name)
        scope = cls.scope_of(options)
        if scope_fits(scope, context.launcher, context.num_nodes):
            return cls(world_size, timeout_s=timeout_s, context=context, **options)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    where = f"ranks on {context.num_nodes} nodes" if context.num_nodes > 1 else "ranks started by torchrun"
    can = planes_for(context.launcher, context.num_nodes)
    inner = (f"; or control={name} control.options.inner={'|'.join(c for c in can if c != name)}"
             if "inner" in options else "")
    raise ConfigError(f"control={name} cannot reach {where} (scope: {scope}); planes that can: "
                      f"{', '.join(can)}{inner}")
