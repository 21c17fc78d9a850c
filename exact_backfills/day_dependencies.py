"""Day dependencies: which of an upstream table's days a day of a table is built from (`upstream_days`), and so which
of its days a changed upstream day makes stale (`downstream_days`, the inverse), each also Dagster's partition mapping
(`to_dagster`). Every day of an upstream a dependency reaches is an interval around the day, so both directions are
computed as merged intervals, never day by day over the history."""

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta

from dagster import PartitionMapping, TimeWindowPartitionMapping

# How far back "every day up to D" reaches in Dagster's mapping: a thousand years, past the first day of any calendar
# (Dagster clamps a window to the partitions that exist; its daily offsets are a date addition, not a walk).
AS_OF_REACH_DAYS = 365_250


@dataclass(frozen=True, order=True)
class DaySpan:
    """The days from `first` to `last`, both included (none when `last` is before `first`)."""

    first: date
    last: date

    def clipped(self, first: date, last: date) -> "DaySpan":
        return DaySpan(max(self.first, first), min(self.last, last))


def days_of(spans: Iterable[DaySpan]) -> list[date]:
    """Every day of `spans`, once each, in order: overlapping spans are merged before they are expanded."""
    found: list[date] = []
    for span in sorted(s for s in spans if s.first <= s.last):
        start = span.first if not found else max(span.first, found[-1] + timedelta(days=1))
        found += [start + timedelta(days=i) for i in range((span.last - start).days + 1)]
    return found


class DayDependency(ABC):
    """What a table's day D reads of an upstream table, and what a changed upstream day makes stale: every day
    dependency answers both, within the calendar's `first`..`last` days, and names Dagster's partition mapping."""

    @abstractmethod
    def upstream_span(self, day: date) -> DaySpan:
        """The upstream days day `day` is built from, before the calendar clips them."""

    @abstractmethod
    def downstream_span(self, day: date, last: date) -> DaySpan:
        """The days built from the upstream's day `day`, before the calendar clips them."""

    @abstractmethod
    def to_dagster(self) -> PartitionMapping:
        """Dagster's partition mapping from the table's days to the upstream's."""

    @abstractmethod
    def reads(self) -> str:
        """What day D reads of the upstream, as the asset's page shows it: "D-6..D", "D-1", "every day up to D"."""

    def problem(self, upstream: str, reads_dimension: bool) -> str:
        """Why the dependency cannot be declared on `upstream` (a dimension's staging or not), or ""."""
        return ""

    @property
    def keys_as_of(self) -> tuple[str, ...] | None:
        """For a dimension read as of the day: the table's columns holding the dimension's key, a new version making
        stale only the later days holding its key (none: every later day). None for any other dependency."""
        return None

    def upstream_days(self, days: Iterable[date], first: date, last: date) -> list[date]:
        """The upstream days a build of `days` reads."""
        return days_of(self.upstream_span(d).clipped(first, last) for d in set(days))

    def downstream_days(self, day: date, first: date, last: date) -> list[date]:
        """The days a change of the upstream's `day` makes stale."""
        return days_of([self.downstream_span(day, last).clipped(first, last)])

    def downstream_of(self, days: Iterable[date], first: date, last: date) -> list[date]:
        """The days a change of the upstream's `days` makes stale."""
        return days_of(self.downstream_span(d, last).clipped(first, last) for d in set(days))


@dataclass(frozen=True)
class Window(DayDependency):
    """Day D is built from the upstream's days D+`start_offset`..D+`end_offset`: `Window(-6, 0)` the week ending on
    D, `Window(-1, -1)` the day before (a lag), `Window(0, 2)` D and the two days after (outcomes of D known only
    days later). A changed upstream day U makes stale the days U-`end_offset`..U-`start_offset`. Dagster's
    `TimeWindowPartitionMapping(start_offset, end_offset)`."""

    start_offset: int
    end_offset: int

    def upstream_span(self, day: date) -> DaySpan:
        return DaySpan(day + timedelta(days=self.start_offset), day + timedelta(days=self.end_offset))

    def downstream_span(self, day: date, last: date) -> DaySpan:
        return DaySpan(day - timedelta(days=self.end_offset), day - timedelta(days=self.start_offset))

    def to_dagster(self) -> PartitionMapping:
        return TimeWindowPartitionMapping(start_offset=self.start_offset, end_offset=self.end_offset)

    def reads(self) -> str:
        start, end = (f"D{o:+d}" if o else "D" for o in (self.start_offset, self.end_offset))
        return start if start == end else f"{start}..{end}"

    def problem(self, upstream: str, reads_dimension: bool) -> str:
        if self.start_offset > self.end_offset:
            return f"its window on {upstream}, D{self.start_offset:+d}..D{self.end_offset:+d}, ends before it starts"
        return ""


def SameDay() -> Window:  # noqa: N802  # a dependency's name, as declarations spell it
    """Day D is built from the upstream's day D: `Window(0, 0)`."""
    return Window(0, 0)


def TrailingDays(days: int) -> Window:  # noqa: N802
    """Day D is built from the upstream's `days` days ending on D (D-(days-1)..D): `Window(-(days - 1), 0)`. A changed
    upstream day makes it and the next `days - 1` days stale."""
    return Window(-(days - 1), 0)


@dataclass(frozen=True)
class AsOf(DayDependency):
    """Day D reads a dimension as of D: every version that took effect up to D, each valid until the next. A new
    version taking effect on day V makes stale the days from V on whose rows hold one of its keys in the columns `on`
    (the table's columns matching the dimension's key, in its order); with no `on`, every day from V on. Dagster's
    `TimeWindowPartitionMapping` reaching back past the first day: every day up to D."""

    on: Sequence[str] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "on", tuple(self.on))

    def upstream_span(self, day: date) -> DaySpan:
        return DaySpan(date.min, day)

    def downstream_span(self, day: date, last: date) -> DaySpan:
        return DaySpan(day, last)

    def to_dagster(self) -> PartitionMapping:
        return TimeWindowPartitionMapping(start_offset=-AS_OF_REACH_DAYS, end_offset=0)

    def reads(self) -> str:
        return "as of D: every version up to D"

    def problem(self, upstream: str, reads_dimension: bool) -> str:
        return "" if reads_dimension else f"it reads {upstream} as of the day, which only a dimension's staging is"

    @property
    def keys_as_of(self) -> tuple[str, ...] | None:
        return tuple(self.on)
