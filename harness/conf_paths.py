"""Where the Hydra configuration lives and what its groups offer."""

from __future__ import annotations

import os


def _conf_dir() -> str:
    """``conf/`` of this source tree (a checkout, an editable install), else the installed copy, the package
    ``tpcp_conf``."""
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")
    if os.path.isfile(os.path.join(here, "config.yaml")):
        return here
    import importlib.util

    spec = importlib.util.find_spec("tpcp_conf")
    return os.path.dirname(spec.origin) if spec and spec.origin else here


CONF_DIR = _conf_dir()
GROUPS = ("control", "model", "workload")


def group_options(group: str) -> list[str]:
    """The choices of config group ``group`` (``control``, ``model``, ``workload``): its yaml files' names."""
    return sorted(f[:-5] for f in os.listdir(os.path.join(CONF_DIR, group)) if f.endswith(".yaml"))
