"""The command line before Hydra composes it: Hydra's own flags, and overrides Hydra would take and then fail
on (or misread), each refused in one line."""

from __future__ import annotations

from .conf_paths import GROUPS, cannot_write

_CFG, _INFO = ("job", "hydra", "all"), ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")
_VALUE_FLAGS = {"--cfg": _CFG, "-c": _CFG, "--info": _INFO, "-i": _INFO, **dict.fromkeys(
    ["--package", "-p", "--experimental-rerun"])}
# the checks before any job compose conf/ as installed: a primary config from elsewhere would go unchecked
_OTHER_CONFIG = ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd")
_MODES = {"--run": "run", "-r": "run", "--multirun": "m", "-m": "m", "--cfg": "cfg", "-c": "cfg", "--info": "info",
          "-i": "info"}
_FLAGS = {"-m", "--multirun", "--help", "-h", "--hydra-help", "--version", "--resolve", "--run", "-r", *_VALUE_FLAGS}


def overrides_of(argv: list[str]) -> tuple[str | None, list[str]]:
    """(a problem with the command's flags, or None; its overrides): only Hydra's own flags pass."""
    modes = [a for a in argv if a.split("=", 1)[0] in _MODES]
    if len({_MODES[m.split("=", 1)[0]] for m in modes}) > 1:
        return f"{' and '.join(modes)}: Hydra takes one of --run, --multirun (-m), --cfg and --info", []
    overrides, i = [], 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if not arg.startswith("-"):
            overrides.append(arg)
        elif name in _OTHER_CONFIG:
            return (f"{name}: the harness composes its own conf/ (config.yaml and its groups); change it with "
                    "overrides, or add an option under conf/<group>/"), []
        elif name not in _FLAGS:
            return f"unknown option {arg!r} (Hydra's: -m, --cfg job|hydra|all, --info, --help, --hydra-help)", []
        elif name in ("-m", "--multirun") and overrides:
            rest = " ".join(a for a in argv if a != arg)
            return f"{arg} goes before the overrides (python -m harness {arg} {rest})", []
        elif name in _VALUE_FLAGS and "=" not in arg:
            choices, given = _VALUE_FLAGS[name], argv[i + 1] if i + 1 < len(argv) else None
            if name in ("--info", "-i") and (given is None or given.startswith("-")):
                i += 1  # its value is optional (all); argparse would take an override as one
                continue
            if given is None or choices is not None and given not in choices:
                return f"{name} takes {'one of ' + ', '.join(choices) if choices else 'a value'}", []
            i += 1  # the flag's value, not an override
        i += 1
    return None, overrides


def option_problem(parsed: list) -> str | None:
    """An override Hydra would take and then fail on, or worse: a list for a group (Hydra merges its options),
    an empty (.hydra/ lands in the working directory) or unwritable ``hydra.run.dir`` / ``hydra.sweep.dir``,
    a string for ``hydra.launcher`` / ``hydra.sweeper`` (nodes Hydra instantiates)."""
    for o in parsed:
        key, value = o.key_or_group, o.value()
        if not key:
            return f"{o.input_line!r}: an override is key=value; the key before '=' is missing"
        if key in GROUPS and isinstance(value, list):
            return f"{key} takes one option; to run several, sweep them: -m {key}={','.join(map(str, value))}"
        if key in ("hydra.launcher", "hydra.sweeper"):
            return f"{key}={value}: Hydra's {key[6:]} is chosen with hydra/{key[6:]}=<name> (installed: basic)"
        if key not in ("hydra.run.dir", "hydra.sweep.dir") or "${" in str(value):
            continue
        if value in ("", None):
            return f"{key} is empty: give a directory (or leave it out: Hydra's default)"
        reason = cannot_write(str(value))  # Hydra creates it when the job starts; a refused command leaves none
        if reason:
            return f"{key}={value}: cannot create the directory: {reason}"
    return None
