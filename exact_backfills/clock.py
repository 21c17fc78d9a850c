"""The one clock: what every part of the machinery reads as "now" (the calendar's moving end, a day's close, its
deadline, the time a change is stamped with) is `now()`, the wall clock. A schedule's tick passes the instant it was
scheduled for instead (the daemon's clock), through the same functions."""

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo


def now() -> datetime:
    """This instant, in UTC."""
    return datetime.now(UTC)


def day_of(instant: datetime, timezone: str) -> date:
    """The day `instant` falls on in `timezone` (an IANA name)."""
    return instant.astimezone(ZoneInfo(timezone)).date()


def today(timezone: str) -> date:
    """The current day in `timezone`: where a pipeline's moving calendar ends."""
    return day_of(now(), timezone)


def end_of(day: date, timezone: str) -> datetime:
    """The instant `day` ends in `timezone`: the midnight after it there (a daylight-saving day is 23 or 25 hours), in
    UTC: Python compares and subtracts two times of one timezone by their wall clocks, an hour off across a change."""
    following = day + timedelta(days=1)
    return datetime(following.year, following.month, following.day, tzinfo=ZoneInfo(timezone)).astimezone(UTC)
