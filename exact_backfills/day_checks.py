"""The checks a pipeline declares on a table beyond the built-in ones: its reconciliation with an upstream table
(`Reconcile`, of `Measure`s), a check of each day's figures (`DayCheck`), and a check of a day's figure against the
days before it (`DayOverDay`). The checks package evaluates them."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from exact_backfills.declaration_error import DeclarationError


@dataclass(frozen=True)
class Measure:
    """One measure a table reconciles with its upstream: a SQL aggregate over the table's rows of a day
    (`aggregate`) equal to one over the upstream's rows of that day (`upstream_aggregate`)."""

    aggregate: str
    upstream_aggregate: str


@dataclass(frozen=True, init=False)
class Reconcile:
    """`measures` of a table equal the same measures of `upstream` day by day (blocking): name -> a `Measure`, or
    its pair (a SQL aggregate over this table's rows of the day, one over the upstream's rows of the day).

    A table over a trailing window (`TrailingDays(n)` on `upstream`) reconciles its day with the upstream's
    `window_days` days ending on it (at most n): the upstream's side of each measure is then summed over those days,
    so it must add up across days (a sum or a count)."""

    upstream: str
    measures: Mapping[str, Measure]
    window_days: int = 1

    def __init__(self, upstream: str, measures: Mapping[str, Measure | tuple[str, str]], window_days: int = 1) -> None:
        object.__setattr__(self, "upstream", upstream)
        object.__setattr__(self, "measures", {name: _measure(upstream, name, m) for name, m in measures.items()})
        object.__setattr__(self, "window_days", window_days)


def _measure(upstream: str, name: str, declared: object) -> Measure:
    """A measure as declared, a `Measure` or a pair of SQL strings; anything else is a DeclarationError naming it."""
    if isinstance(declared, Measure):
        return declared
    if isinstance(declared, tuple) and len(declared) == 2 and all(isinstance(sql, str) for sql in declared):
        return Measure(*declared)
    raise DeclarationError(
        f"Reconcile({upstream!r}): measure {name!r} is {declared!r}, not a Measure or a pair of SQL aggregates "
        "(this table's, the upstream's)"
    )


@dataclass(frozen=True)
class DayCheck:
    """A check of the user's, evaluated on every day a change writes (before it is written) and on what is published:
    `figures` are SQL aggregates over the day's rows, computed for every day at once, grouped by day; `passes` decides
    from a day's figures (a name -> value mapping; None where the day has no rows to aggregate). Shown in Dagster
    like the built-in checks, with the figures; `blocking` refuses the change (nothing written in any table) when it
    fails on any day, like unique_key."""

    name: str
    figures: Mapping[str, str]
    passes: Callable[[Mapping[str, Any]], bool]
    blocking: bool = False
    description: str = ""


@dataclass(frozen=True)
class DayOverDay:
    """A check of the user's comparing a day's figure with the days before it: `figure` is a SQL aggregate over the
    day's rows; the check fails on a day whose figure differs from its average over the `days_before` previous days
    by more than `max_change` of that average (0.5: half). Previous days are this change's rows where it writes them,
    the published ones elsewhere; a day without rows is left out of the average, and a day with none to compare
    with passes. `blocking` refuses the change when it fails on any day, like a `DayCheck`."""

    name: str
    figure: str
    max_change: float
    days_before: int = 1
    blocking: bool = False
    description: str = ""

    @property
    def figures(self) -> Mapping[str, str]:
        return {"value": self.figure}


UserCheck = DayCheck | DayOverDay


def refused_check(check: UserCheck) -> str:
    """Why a check of the user's cannot be served ("" when it can)."""
    if isinstance(check, DayOverDay) and check.days_before < 1:
        return f"it compares with {check.days_before} days before, not 1 or more"
    if isinstance(check, DayOverDay) and not check.max_change >= 0:
        return f"its largest change {check.max_change} is not a fraction of 0 or more"
    return ""
