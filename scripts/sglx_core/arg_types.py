"""Argument types for numbers on a command line, shared by the plugin's entry points (the
gate's scripts, preflight, the collective smoke test) and sglx's own commands.

argparse's `float` takes `nan`, `inf`, `0` and negative numbers. A timeout of any of them gives
a run that never ends or one that never starts, and `nan` passes every comparison meant to
catch it (`nan <= 0` is false). Each type here refuses them with argparse's own usage error
(exit 2), naming the flag and what to give.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def positive(flag: str) -> Callable[[str], float]:
    """A finite number above 0: seconds, a rate, a bound."""
    return _number(flag, lambda value: value > 0, "a number above 0")


def non_negative(flag: str) -> Callable[[str], float]:
    """A finite number of 0 or more (0 often means "off")."""
    return _number(flag, lambda value: value >= 0, "a number of 0 or more")


def finite(flag: str) -> Callable[[str], float]:
    """Any finite number: the range is the caller's to check (and to report its own way)."""
    return _number(flag, lambda value: True, "a finite number")


def fraction(flag: str) -> Callable[[str], float]:
    """A finite number above 0 and at most 1."""
    return _number(flag, lambda value: 0 < value <= 1, "a number above 0 and at most 1")


def _number(flag: str, valid: Callable[[float], bool], what: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or not valid(value):
            raise argparse.ArgumentTypeError(f"{flag} must be {what}, not {text!r}")
        return value

    parse.__name__ = "number"  # argparse names the type in some messages
    return parse
