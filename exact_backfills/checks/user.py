"""The user's own checks: SQL figures aggregated over each day's rows in the profile's pass, and the user's function
deciding from a day's figures (`DayCheck`), or a figure compared with the days before (`DayOverDay`)."""

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from exact_backfills.checks import day_over_day
from exact_backfills.checks.base import ERROR, Check, Outcome
from exact_backfills.day_checks import DayCheck, DayOverDay, UserCheck
from exact_backfills.declare import Declared

Figures = Mapping[date, Mapping[str, Any]]  # day -> aggregate column -> value


@dataclass(frozen=True)
class DayFigures:
    """A user check's record: its figures by the names the user gave them, and why its function raised, if it did."""

    figures: Mapping[str, Any] = field(default_factory=dict)
    error: str = ""

    def metadata(self) -> dict[str, Any]:
        shown = {name: _metadata_value(v) if v is not None else "none" for name, v in self.figures.items()}
        return {**shown, **({ERROR: self.error} if self.error else {})}

    def summary(self) -> str:
        """Every figure, zeros too."""
        return ", ".join(f"{k}={v}" for k, v in self.metadata().items())


def check_of(check: UserCheck) -> Check:
    said = check.description or f"{check.name}, the pipeline's own check of each day."
    if isinstance(check, DayOverDay):
        description = (
            f"{said} Fails on a day whose {check.figure} moved by more than {check.max_change:.0%} from its average "
            f"over the {check.days_before} day(s) before."
        )
    else:
        figures = ", ".join(f"{name} = {sql}" for name, sql in check.figures.items())
        description = f"{said} Figures: {figures}."
    return Check(check.name, description, blocking=check.blocking)


def _figure(name: str, index: int) -> str:
    """The aggregate column of a user check's figure: apart from the profile's own columns, whatever it is called."""
    return f"_check{index}_{name}"


def figure_columns(table: Declared) -> list[tuple[str, Column]]:
    """Every figure of the table's checks, as an aggregate column of the profile's pass."""
    return [
        (_figure(name, i), F.expr(sql)) for i, check in enumerate(table.checks) for name, sql in check.figures.items()
    ]


def _metadata_value(value: Any) -> Any:
    """A figure as Dagster metadata takes it."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    return value


def decided(check: DayCheck, day: date, values: Mapping[str, Any]) -> Outcome:
    """The user's function on a day's figures; its failing fails the check, saying why."""
    try:
        passed, why = bool(check.passes(values)), ""
    except Exception as e:
        passed, why = False, f"{type(e).__name__}: {e}"
    return check_of(check).outcome(day, passed, DayFigures(values, why))


def compares_days_before(table: Declared, days: list[date]) -> list[date]:
    """The days before `days`, outside them, whose figures the table's day-over-day checks compare with."""
    wanted = {d for c in table.checks if isinstance(c, DayOverDay) for d in day_over_day.days_before(c, days)}
    return sorted(wanted - set(days))


def outcomes(table: Declared, figures: Figures, days: list[date]) -> list[Outcome]:
    """Each user check on each day, from the day's figures (the figures of no rows on a day without any; for a
    day-over-day check, the days before too, where `figures` has them)."""
    found = []
    for i, check in enumerate(table.checks):
        if isinstance(check, DayOverDay):
            values = {d: f[_figure("value", i)] for d, f in figures.items()}
            found += [day_over_day.compared(check_of(check), check, day, values) for day in days]
        else:
            found += [
                decided(check, day, {name: figures[day][_figure(name, i)] for name in check.figures}) for day in days
            ]
    return found
