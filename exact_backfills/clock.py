"""The one clock: what every part of the machinery reads as "now" (the calendar's moving end, a day's close, its
deadline, the time a change is stamped with) is `now()`: the wall clock, or the simulated clock when one is set. A
schedule's tick passes the instant it was scheduled for instead (the daemon's clock), through the same functions.

The simulated clock (the tests') is a file, named by SIMULATED_CLOCK, holding how far ahead of the wall clock
"now" is, in seconds: time runs at the wall clock's pace from where it was set, and `set_simulated` moves it forward.
Dagster's processes read it too once they load the project (dagster_private.follow_the_clock): the daemon's scheduler
and sensors, the runs, the webserver's partitions."""

import os
import tempfile
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

# The environment variable naming the simulated clock's file; unset, the clock is the wall clock.
SIMULATED_CLOCK = "EXACT_BACKFILLS_SIMULATED_CLOCK"


class ClockError(ValueError):
    """A simulated clock moved backwards or unreadable: the scheduler's and sensors' cursors assume time goes on."""


def simulated() -> Path | None:
    """The simulated clock's file, when one is set."""
    path = os.environ.get(SIMULATED_CLOCK)
    return Path(path) if path else None


def now() -> datetime:
    """This instant, in UTC."""
    return datetime.now(UTC) + _ahead()


def _ahead() -> timedelta:
    path = simulated()
    if path is None:
        return timedelta(0)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return timedelta(0)
    try:
        return timedelta(seconds=float(text))
    except ValueError:
        raise ClockError(f"the simulated clock {path} holds {text!r}, not a number of seconds") from None


def set_simulated(instant: datetime) -> None:
    """Moves the simulated clock to `instant` (from there it runs at the wall clock's pace). Forward only."""
    path = simulated()
    if path is None:
        raise ClockError(f"no simulated clock: set {SIMULATED_CLOCK} to a file's path")
    if instant.tzinfo is None:
        raise ClockError(f"{instant} has no timezone")
    if path.exists() and instant < now():
        raise ClockError(f"the simulated clock is at {now().isoformat()}: it does not go back to {instant.isoformat()}")
    ahead = (instant - datetime.now(UTC)).total_seconds()
    # Written whole, then renamed: a reader sees the old offset or the new one, never half of it.
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".clock.", delete=False) as written:
        written.write(repr(ahead))
    os.replace(written.name, path)


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
