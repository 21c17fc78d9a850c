"""A pipeline's calendar: the days its tables are partitioned by, daily, in its timezone, from its first day to its
last (inclusive), or to the current day when it declares no last day (an open end: a new partition each day, without
a reload).

A pipeline declares its own (`Pipeline(calendar=Calendar(first_day=..., timezone=...))`); the environment's
PARTITION_START_DATE and PARTITION_END_DATE, where set, stand in for its days (demos, the tests, the bench). They and
the clock are read when the pipeline's partitions are asked for (`Pipeline.partitions`), never at import: a process
whose environment changes (the tests') sees its partitions change, two pipelines in one process keep each their own,
and a long-lived process sees today's partition appear at midnight in the pipeline's timezone."""

import functools
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dagster import DailyPartitionsDefinition

from exact_backfills import clock
from resources.settings import SettingsError, settings


@dataclass(frozen=True)
class Calendar:
    """What a pipeline declares: its first day, its last day (None: the current day, moving with time), the timezone
    whose midnights end its days (an IANA name; a day of a daylight-saving change is 23 or 25 hours), when a day
    closes (`closes_after` its end: the daily run publishes it then) and its deadline (`publish_by` after its end,
    e.g. `timedelta(hours=6)`: by 06:00 the next morning; None: no deadline)."""

    first_day: date
    last_day: date | None = None
    timezone: str = "UTC"
    closes_after: timedelta = timedelta(minutes=30)
    publish_by: timedelta | None = None

    def problems(self) -> list[str]:
        days = (self.first_day,) if self.last_day is None else (self.first_day, self.last_day)
        if any(not isinstance(d, date) or isinstance(d, datetime) for d in days):
            return [f"its calendar's first and last day are dates, not {days!r}"]
        if self.last_day is not None and self.last_day < self.first_day:
            return [f"its calendar's last day {self.last_day} is before its first day {self.first_day}"]
        if not _known_timezone(self.timezone):
            return [f"its calendar's timezone {self.timezone!r} is not an IANA timezone name (e.g. 'America/New_York')"]
        return _times_problems(self.closes_after, self.publish_by)

    def in_effect(self, at: datetime | None = None) -> "Partitions":
        """The partitions at `at` (the clock's now when None): this calendar's days, with PARTITION_START_DATE and
        PARTITION_END_DATE where set, an open end at that instant's day in the calendar's timezone."""
        configured = settings()
        moving = self.last_day is None and not configured.partition_end_date
        today = clock.day_of(at or clock.now(), self.timezone) if moving else None
        return _in_effect(self, configured.partition_start_date, configured.partition_end_date, today)

    def closes_at(self, day: date) -> datetime:
        """When `day` closes: its end in the calendar's timezone, plus `closes_after`."""
        return clock.end_of(day, self.timezone) + self.closes_after

    def publishes(self, day: date, at: datetime) -> bool:
        """Whether a write at `at` publishes `day`: from the day's end on. Before it, the day is in the making: a late
        row of an earlier day restates the days of a window that holds it, today's included, and that is not its
        publication (nor what its deadline asks for)."""
        return at >= clock.end_of(day, self.timezone)

    def deadline(self, day: date) -> datetime | None:
        """When `day` must be published by (None: no deadline): `publish_by` after its end on the wall clock of the
        calendar's timezone, so that 06:00 the next morning stays 06:00 on the morning of a daylight-saving change."""
        if self.publish_by is None:
            return None
        end = clock.end_of(day, self.timezone).astimezone(ZoneInfo(self.timezone))
        return (end + self.publish_by).astimezone(UTC)  # an aware time plus a timedelta moves its wall clock

    def last_closed_day(self, at: datetime) -> date:
        """The latest day closed at `at`."""
        return clock.day_of(at - self.closes_after, self.timezone) - timedelta(days=1)


@dataclass(frozen=True)
class Partitions:
    """A pipeline's daily partitions now, `first_day`..`last_day`: what Dagster's `DailyPartitionsDefinition` of its
    assets holds, and every day a backfill, a restatement or a quarantine rule may name. `moving`: the last day is
    the current day of an open calendar, and Dagster's partitions grow with time on their own."""

    first_day: date
    last_day: date
    timezone: str = "UTC"
    moving: bool = False

    @property
    def days(self) -> list[date]:
        return [self.first_day + timedelta(days=i) for i in range((self.last_day - self.first_day).days + 1)]

    def __contains__(self, day: date) -> bool:
        return self.first_day <= day <= self.last_day

    def clamped(self, day: date) -> date:
        """The day within the partitions nearest to `day`."""
        return min(max(day, self.first_day), self.last_day)

    @functools.cached_property
    def definition(self) -> DailyPartitionsDefinition:
        """Dagster's partitions of the pipeline's assets and checks: one object per calendar, as Dagster compares
        them. An open calendar's ends one day past Dagster's default (`end_offset=1`): today's partition exists, so
        today's rows are published as they land, not quarantined until midnight."""
        if self.moving:
            return DailyPartitionsDefinition(
                start_date=self.first_day.isoformat(), timezone=self.timezone, end_offset=1
            )
        return DailyPartitionsDefinition(
            start_date=self.first_day.isoformat(),
            end_date=(self.last_day + timedelta(days=1)).isoformat(),  # Dagster's end is exclusive
            timezone=self.timezone,
        )


def declared_calendar_problems(declared: object) -> list[str]:
    """Why a pipeline's declared calendar cannot be served ([] when it can)."""
    if declared is None:
        return ["it declares no calendar: Pipeline(..., calendar=Calendar(first_day=..., timezone=...))"]
    if not isinstance(declared, Calendar):
        return [f"its calendar {declared!r} is not a Calendar(first_day=..., last_day=..., timezone=...)"]
    return declared.problems()


def _times_problems(closes_after: object, publish_by: object) -> list[str]:
    if not isinstance(closes_after, timedelta) or not timedelta(0) <= closes_after < timedelta(days=1):
        return [
            f"its calendar's closes_after {_shown(closes_after)} is not a timedelta of 0 to 24 hours after a day's end"
        ]
    if closes_after % timedelta(minutes=1):
        return [f"its calendar's closes_after {closes_after} is not a whole number of minutes (a schedule's tick)"]
    if publish_by is not None and (not isinstance(publish_by, timedelta) or publish_by < closes_after):
        return [f"its calendar's publish_by {_shown(publish_by)} is not a timedelta at or after its closes_after"]
    return []


def _shown(value: object) -> str:
    return str(value) if isinstance(value, timedelta) else repr(value)


def _known_timezone(name: object) -> bool:
    try:
        ZoneInfo(str(name))
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return isinstance(name, str)


@functools.lru_cache(maxsize=64)
def _in_effect(declared: Calendar, start: str, end: str, today: date | None) -> Partitions:
    first = date.fromisoformat(start) if start else declared.first_day
    last = date.fromisoformat(end) if end else (today or declared.last_day)
    assert last is not None  # an open calendar's end is today
    if last < first:  # both set and inverted: the settings refuse it themselves
        raise SettingsError(
            f"PARTITION_END_DATE={last} is before the calendar's first day {first}"
            if end
            else f"PARTITION_START_DATE={first} is after the calendar's last day {last}"
        )
    return Partitions(first, last, declared.timezone, moving=today is not None)
