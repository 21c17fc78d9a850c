"""A pipeline's calendar: the days its tables are partitioned by, daily, from its first day to its last (inclusive).

A pipeline declares its own (`Pipeline(calendar=Calendar(first_day=..., last_day=...))`); the environment's
PARTITION_START_DATE and PARTITION_END_DATE, where set, stand in for its days (demos, the tests, the bench). They are
read when the pipeline's calendar is asked for (`Pipeline.partitions`), never at import: a process whose environment
changes (the tests') sees its calendar change, and two pipelines in one process keep each its own."""

import functools
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from dagster import DailyPartitionsDefinition

from resources.settings import SettingsError, settings


@dataclass(frozen=True)
class Calendar:
    """Daily partitions by event date, `first_day`..`last_day`: what Dagster's `DailyPartitionsDefinition` of the
    pipeline's assets holds, and every day a backfill, a restatement or a quarantine rule may name."""

    first_day: date
    last_day: date

    def problems(self) -> list[str]:
        days = (self.first_day, self.last_day)
        if any(not isinstance(d, date) or isinstance(d, datetime) for d in days):
            return [f"its calendar's first and last day are dates, not {days!r}"]
        if self.last_day < self.first_day:
            return [f"its calendar's last day {self.last_day} is before its first day {self.first_day}"]
        return []

    @property
    def days(self) -> list[date]:
        return [self.first_day + timedelta(days=i) for i in range((self.last_day - self.first_day).days + 1)]

    def __contains__(self, day: date) -> bool:
        return self.first_day <= day <= self.last_day

    def clamped(self, day: date) -> date:
        """The day within the calendar nearest to `day`."""
        return min(max(day, self.first_day), self.last_day)

    @functools.cached_property
    def definition(self) -> DailyPartitionsDefinition:
        """Dagster's partitions of the pipeline's assets and checks: one object per calendar, as Dagster compares
        them."""
        return DailyPartitionsDefinition(
            start_date=self.first_day.isoformat(),
            end_date=(self.last_day + timedelta(days=1)).isoformat(),  # Dagster's end is exclusive
        )

    def in_effect(self) -> "Calendar":
        """This calendar with PARTITION_START_DATE and PARTITION_END_DATE, where set, in place of its days."""
        configured = settings()
        return _in_effect(self, configured.partition_start_date, configured.partition_end_date)


def declared_calendar_problems(declared: object) -> list[str]:
    """Why a pipeline's declared calendar cannot be served ([] when it can)."""
    if declared is None:
        return ["it declares no calendar: Pipeline(..., calendar=Calendar(first_day=..., last_day=...))"]
    if not isinstance(declared, Calendar):
        return [f"its calendar {declared!r} is not a Calendar(first_day=..., last_day=...)"]
    return declared.problems()


@functools.lru_cache(maxsize=32)
def _in_effect(declared: Calendar, start: str, end: str) -> Calendar:
    first = date.fromisoformat(start) if start else declared.first_day
    last = date.fromisoformat(end) if end else declared.last_day
    if last < first:  # both set and inverted: the settings refuse it themselves
        raise SettingsError(
            f"PARTITION_END_DATE={last} is before the calendar's first day {first}"
            if end
            else f"PARTITION_START_DATE={first} is after the calendar's last day {last}"
        )
    return declared if (first, last) == (declared.first_day, declared.last_day) else Calendar(first, last)
