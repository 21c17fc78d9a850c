"""A user's check of a day's figure against the days before it (`DayOverDay`): the figure is one of the profile's
aggregates, the days before are this change's rows where it writes them and the published rows elsewhere."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from exact_backfills.checks.base import Check, Outcome, Record
from exact_backfills.day_checks import DayOverDay


@dataclass(frozen=True)
class DayChange(Record):
    SUMMARY = ("value", "previous_average", "relative_change", "max_change")

    value: float | None
    previous_average: float | None  # over the days before that have rows (None: none has)
    relative_change: float | None  # |value - previous_average| / previous_average
    max_change: float
    days_compared: int


def days_before(check: DayOverDay, days: list[date]) -> list[date]:
    """The days each of `days` is compared with."""
    return sorted({d - timedelta(days=k) for d in days for k in range(1, check.days_before + 1)})


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float | Decimal) else None


def _change(value: float | None, average: float | None) -> float | None:
    """The relative change from the average; infinite from an average of 0 to another value."""
    if value is None or average is None:
        return None
    if average == 0:
        return 0.0 if value == 0 else float("inf")
    return round(abs(value - average) / abs(average), 6)


def compared(check: Check, declared: DayOverDay, day: date, values: Mapping[date, Any]) -> Outcome:
    """The day's figure against its average over the days before it that have one (`values`: day -> figure). The
    figure of a day without rows (None) counts as 0 on the day checked: a day that lost its rows moved too."""
    previous = [_number(values.get(day - timedelta(days=k))) for k in range(1, declared.days_before + 1)]
    before = [v for v in previous if v is not None]
    value = _number(values.get(day))
    average = sum(before) / len(before) if before else None
    change = _change(value if value is not None else 0.0, average)
    passed = change is None or change <= declared.max_change
    shown = None if change is None or change == float("inf") else change  # Dagster's metadata takes no infinity
    return check.outcome(day, passed, DayChange(value, average, shown, declared.max_change, len(before)))
