"""Value checks and the bad-input error every layer shares, in a package below them all (nothing imports
upward)."""

from __future__ import annotations

import argparse
import math
import numbers
import sys


class ConfigError(ValueError):
    """Bad input; the message is one line that says what to change."""


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one ``error:`` line on stderr and exit 2, like the rest of the harness."""

    def error(self, message: str):
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def first_line(e: BaseException) -> str:
    """The first line of ``e``'s message that is not blank, stripped ("" for none)."""
    return next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")


def is_int(v) -> bool:
    """An integer (any ``numbers.Integral``: int, numpy ints), never a bool (``tp=true`` must not mean 1)."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def is_number(v) -> bool:
    """A finite real number (int or float, numpy's too), never a bool."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def check_int(owner: str, key: str, v, least: int) -> None:
    """Raises ValueError ``"{owner} {key} must be an integer >= {least}, got ..."`` unless ``v`` is one."""
    if not is_int(v) or v < least:
        raise ValueError(f"{owner} {key} must be an integer >= {least}, got {v!r}")
