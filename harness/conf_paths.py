"""Where the Hydra configuration lives and its groups; the user's paths, and whether files can be written."""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import os
import shutil
import tempfile

from omegaconf import OmegaConf

# conf/ of this source tree, else the installed package tpcp_conf
CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")
if not os.path.isfile(os.path.join(CONF_DIR, "config.yaml")):
    _spec = importlib.util.find_spec("tpcp_conf")
    CONF_DIR = os.path.dirname(_spec.origin) if _spec and _spec.origin else CONF_DIR
GROUPS = ("control", "model", "workload")
# hydra.run.dir and sweep.dir: a results_dir of '~/x' is the user's home, as for the rows, not a folder named ~
OmegaConf.register_new_resolver("expanduser", os.path.expanduser, replace=True)


def group_options(group: str) -> list[str]:
    """The options of config group ``group``: its yaml files' names in ``conf/<group>/``, sorted ([]: not a group)."""
    folder = os.path.join(CONF_DIR, group)
    return sorted(f[:-5] for f in os.listdir(folder) if f.endswith(".yaml")) if os.path.isdir(folder) else []


def task_overrides() -> list[str]:
    """This job's command-line overrides (``key=value``), [] when not running under Hydra."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def user_path(path: str) -> str:
    """``path`` (``~`` expanded) made absolute against the directory the user ran from, despite ``hydra.job.chdir``."""
    from hydra.utils import to_absolute_path

    return to_absolute_path(os.path.expanduser(path))


def cannot_write(directory: str) -> str | None:
    """Why no file can be written in ``directory``, or None: tried, then the file system put back as it was."""
    missing, path = [], os.path.abspath(directory)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        missing.append(path)  # deepest first
        path = os.path.dirname(path)
    try:
        os.makedirs(directory, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".tpcp-write-check-"):
            pass
    except OSError as e:
        return e.strerror or str(e)
    finally:
        for made in missing:
            with contextlib.suppress(OSError):
                os.rmdir(made)
    return None


def results_problem(results_dir: str, results_file: str, folders: dict[str, str]) -> str | None:
    """Why rows cannot go to ``results_file`` in ``results_dir``, nor a run's files to its ``folders`` ({name:
    what goes there}), as one line, or None; leaves no trace on disk."""
    directory = blocking = user_path(results_dir)
    while not os.path.exists(blocking) and os.path.dirname(blocking) != blocking:
        blocking = os.path.dirname(blocking)  # the nearest that exists: a file there blocks
    if os.path.exists(blocking) and not os.path.isdir(blocking):
        return (f"results_dir={results_dir} is a file, not a directory" if blocking == directory
                else f"results_dir={results_dir} cannot be created: {blocking} is a file, not a directory")
    if reason := cannot_write(directory):
        return f"cannot write results to {directory}: {reason}"
    if (free := shutil.disk_usage(blocking).free) < 1 << 20:  # Hydra's files first: a traceback, no row
        return f"cannot write results to {directory}: its file system is full ({free} bytes free)"
    if os.path.islink(path := os.path.join(directory, results_file)) and not os.path.exists(path):
        return f"results_file={results_file}: {path} is a link to {os.readlink(path)}, which does not exist"
    if os.path.exists(path) and not os.path.isfile(path):  # a FIFO: a hang
        kind = "a directory" if os.path.isdir(path) else "not a regular file"
        return f"results_file={results_file}: {path} is {kind}"
    if os.path.isfile(path):  # read-only (or immutable): refused now, not once a sweep has run
        try:
            open(path, "a").close()  # appends nothing: the file is left as it was
        except OSError as e:
            return f"cannot append rows to {path}: {e.strerror or e}"
        if not results_header(path):
            return (f"results_file={results_file}: {path} is not a results CSV (its first line names no "
                    "schema_version column); give another results_file, or move that file")
    for name, what in folders.items():
        folder = os.path.join(directory, name)
        if os.path.lexists(folder) and not os.path.isdir(folder):
            return f"cannot write {what} to {folder}: it is not a directory (move it, or pick another results_dir)"
        if os.path.isdir(folder) and (reason := cannot_write(folder)):
            return f"cannot write {what} to {folder}: {reason}"
    return None


def results_header(path: str) -> bool:
    """Whether ``path`` is empty or starts with a results CSV's header (any schema version: it names
    ``schema_version``); a file that cannot be read counts as one (its append fails with its own reason)."""
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 16).decode("utf-8-sig", "replace")
    except OSError:
        return True
    try:
        return not first or "schema_version" in next(csv.reader([first]), [])
    except csv.Error:  # a bare carriage return inside the line, for one: not a CSV at all
        return False
