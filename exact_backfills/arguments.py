"""The command line's argument types: a bad value is one line saying what it must be (argparse prints it with the
option's name). A pipeline's own commands use them too."""

import argparse
from collections.abc import Callable
from datetime import date
from typing import Any


def day(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a YYYY-MM-DD date: {value!r}") from None


def _number(kind: type[float] | type[int], low: float, inclusive: bool, what: str) -> Callable[[str], Any]:
    def parse(value: str) -> Any:
        try:
            number = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {value!r}") from None
        if number < low or (number == low and not inclusive):
            raise argparse.ArgumentTypeError(f"not {what}: {value!r}")
        return number

    return parse


positive_int = _number(int, 0, False, "a whole number above 0")
version = _number(int, 0, True, "a Delta version (0 or above)")
positive_number = _number(float, 0, False, "a number above 0")


def share(value: str) -> float:
    found = _number(float, 0, True, "a share between 0 and 1")(value)
    if found > 1:
        raise argparse.ArgumentTypeError(f"not a share between 0 and 1: {value!r}")
    return found
