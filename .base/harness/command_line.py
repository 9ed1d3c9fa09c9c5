"""The command line before Hydra sees it: its flags (Hydra's, each checked), its overrides parsed by Hydra's
grammar (an error as one line), and ``~llm.KEY`` taken out (the engine's default applies)."""

from __future__ import annotations

import re

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from .conf_paths import GROUPS, group_options
from .conf_schema import LLM_DEFAULTS

_CFG, _INFO = ("job", "hydra", "all"), ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")
_VALUE_FLAGS = {"--cfg": _CFG, "-c": _CFG, "--info": _INFO, "-i": _INFO, **dict.fromkeys(
    ["--package", "-p", "--shell-completion", "-sc"])}
# the checks before any job compose conf/ as installed: a primary config from elsewhere would go unchecked
_OTHER_CONFIG = ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd")
_MODES = {"--run": "r", "-r": "r", "--multirun": "m", "-m": "m", "--cfg": "c", "-c": "c", "--info": "i", "-i": "i"}
_FLAGS = {"-m", "--multirun", "--help", "-h", "--hydra-help", "--version", "--resolve", "--run", "-r", *_VALUE_FLAGS}


def overrides_of(argv: list[str]) -> tuple[list[str], str | None]:
    """(the command's overrides, its first ``--package`` / ``-p``: None without one, or for ``_global_``, the whole
    configuration). Raises ValueError: a flag that is not Hydra's, or that Hydra would misread."""
    if "--hydra-help" in argv and any(a[:1] not in "-" for a in argv):  # Hydra composes its own config alone
        raise ValueError("--hydra-help shows Hydra's own options and takes no overrides (--help takes them)")
    if "--resolve" in argv and not {"--cfg", "-c", "--help", "-h"} & {a.split("=", 1)[0] for a in argv}:
        raise ValueError("--resolve goes with --cfg (python -m harness --cfg job --resolve ...)")
    if {"--help", "-h"} & set(argv) and {"-m", "--multirun"} & set(argv):
        raise ValueError("--help shows one job's configuration: leave out -m and give one value of each key")
    modes = [a for a in argv if a.split("=", 1)[0] in _MODES]
    if len({_MODES[m.split("=", 1)[0]] for m in modes}) > 1:
        raise ValueError(f"{' and '.join(modes)}: Hydra takes one of --run, --multirun (-m), --cfg and --info")
    values, i = set(), 0  # the places of the flags' values (--cfg job: job), wherever the flags stand
    while i < len(argv):
        name, attached, _ = argv[i].partition("=")  # --cfg=job: attached
        # not --cfg=job, nor --info before another flag or at the end
        takes = (argv[i].startswith("-") and name in _VALUE_FLAGS and not attached and i + 1 < len(argv)
                 and not (name in ("--info", "-i") and argv[i + 1].startswith("-")))
        values |= {i + 1} if takes else set()
        i += 1 + takes
    overrides, packages = [], []
    for i, arg in enumerate(argv):
        name, attached, value = arg.partition("=")
        if i in values:
            continue
        if not arg.startswith("-"):
            overrides.append(arg)
        elif name == "--experimental-rerun":
            raise ValueError("--experimental-rerun: the harness does not save the pickled jobs Hydra reruns; run the "
                             "command again (each run's configuration is in its results/runs/<run_id>.json)")
        elif name in _OTHER_CONFIG:
            raise ValueError(f"{name}: the harness composes its own conf/ (config.yaml and its groups); change it "
                             "with overrides, or add an option under conf/<group>/")
        elif name not in _FLAGS:
            raise ValueError(f"unknown option {arg!r} (Hydra's: -m, --cfg job|hydra|all, --info, --help, --hydra-help)")
        elif overrides and (name in ("-m", "--multirun") or any(
                not a.startswith("-") for j, a in enumerate(argv) if j > i and j not in values)):
            flag = argv[i:i + 1 + (i + 1 in values)]  # Hydra's argparse takes one run of overrides: else its usage
            rest = " ".join(a for j, a in enumerate(argv) if not i <= j < i + len(flag))
            raise ValueError(f"{arg} goes before the overrides (python -m harness {' '.join(flag)} {rest})")
        elif name in _VALUE_FLAGS and (attached or i + 1 in values or name not in ("--info", "-i")):
            choices = _VALUE_FLAGS[name]  # --info's value is optional (all), yet argparse would take an override
            given = value if attached else argv[i + 1] if i + 1 in values else None
            if given is None or choices is not None and given not in choices:
                raise ValueError(f"{name} takes {'one of ' + ', '.join(choices) if choices else 'a value'}")
            packages += [given] if name in ("--package", "-p") else []
            if given == "hydra" and "--resolve" in argv:  # Hydra resolves its node alone: ${results_dir} fails
                raise ValueError(f"{name} hydra --resolve: the run dirs name results_dir, outside the hydra node; "
                                 "use --cfg all --resolve, or --cfg hydra without --resolve")
    return overrides, None if packages[:1] in ([], ["_global_"]) else packages[0]


def check_options(parsed: list) -> None:
    """Raises ValueError: an override Hydra would take and then fail on (a list for a group, an empty
    ``hydra.run.dir`` / ``hydra.sweep.dir``, a string for ``hydra.launcher`` / ``hydra.sweeper``), or worse."""
    for o in parsed:
        key, value = o.key_or_group, o.value()
        if not key:
            raise ValueError(f"{o.input_line!r}: an override is key=value; the key before '=' is missing")
        if key in GROUPS and isinstance(value, list):
            raise ValueError(f"{key} takes one option; to run several, sweep them: -m {key}="
                             f"{','.join(map(str, value))}")
        if key in GROUPS and not (isinstance(value, str) or o.is_sweep_override() or o.is_delete()):
            raise ValueError(f"{key} takes the name of one option, got {o.input_line.split('=', 1)[1]!r} "
                             f"(available: {', '.join(group_options(key))})")
        if key in ("hydra.launcher", "hydra.sweeper"):
            raise ValueError(f"{key}={value}: Hydra's {key[6:]} is chosen with hydra/{key[6:]}=<name> "
                             "(installed: basic)")
        if key in ("hydra.run.dir", "hydra.sweep.dir") and value in ("", None):  # writable: preflight._hydra_dirs
            raise ValueError(f"{key} is empty: give a directory (or leave it out: Hydra's default)")


def parse(arg: str):
    """``arg`` as Hydra parses it (an ``Override``). Raises ValueError (Hydra's first line): it does not parse."""
    try:
        return OverridesParser.create().parse_overrides([arg])[0]
    except HydraException as e:
        lines = [ln for ln in str(e).strip().splitlines() if not ln.startswith(("Error parsing", "See https"))]
        first = re.sub(r" expecting \{.*\}", "", lines[0]) if lines else type(e).__name__  # not the token list
        raise ValueError(f"cannot parse {arg!r}: {first}{_quote_hint(arg, lines)} (the grammar: "
                         f"https://hydra.cc/docs/advanced/override_grammar/basic/)") from None


def _quote_hint(arg: str, lines: list[str]) -> str:
    """For a character of a value that Hydra's lexer takes only quoted (non-ASCII, ``&;#!``): how to quote it."""
    lead = "LexerNoViableAltException: "
    if len(lines) < 2 or not lines[0].startswith(lead) or lines[1].strip() != "^":
        return ""
    at, (key, _, value) = lines[1].index("^") - len(lead), arg.partition("=")
    if not len(key) < at < len(arg):  # in the key: no quotes help
        return ""
    plain = not set(value) & set("'\"[]{}(),")  # else a list, a sweep or a quote of its own: quote the item
    return f"; {arg[at]!r} needs quotes: " + (f"\"{key}='{value}'\" in a shell" if plain else "quote the item with it")


def engine_defaults(argv: list[str], overrides: list[str]) -> tuple[list[str], list[str]]:
    """``argv`` without its ``~llm.KEY`` (the schema keeps every key: the engine's default applies) and the settings
    of KEY before it, as Hydra applies overrides in order; a note for each. Raises ValueError: ``~llm.KEY=VALUE``
    where KEY's value is not VALUE (Hydra deletes only the value given)."""
    drop, notes = set(), []
    for d, arg in enumerate(argv):
        key, _, given = arg[5:].partition("=")
        if not (arg.startswith("~llm.") and key in LLM_DEFAULTS and arg in overrides):
            continue
        sets = [j for j, a in enumerate(argv[:d]) if a in overrides and a.lstrip("+").split("=", 1)[0] == f"llm.{key}"]
        now = parse(argv[sets[-1]].lstrip("+")).value() if sets else LLM_DEFAULTS[key]
        if given and parse(f"x={given}").value() != now:
            raise ValueError(f"{arg}: llm.{key} is {now!r} here, not {given} (~KEY=VALUE deletes only that value)")
        drop |= {d, *sets}
        if not any(a.lstrip("+").split("=", 1)[0] == f"llm.{key}" for a in argv[d + 1:]):
            notes.append(f"note: llm.{key} was deleted (~): the engine's default, {LLM_DEFAULTS[key]!r}, applies")
    return [a for j, a in enumerate(argv) if j not in drop], notes
