"""published_by_deadline: a day was first published by its deadline (the calendar's `publish_by` after the day's end
in the pipeline's timezone), or how late it was and why; a day not published yet fails once its deadline has passed.
Restating a day later is not lateness: the day's first publication is what counts, from the day's end on (a write
before it, a window's restatement reaching the day in the making, is not its publication). A day due before its table
was first published is its history (built when the table was, not late): it passes, saying so."""

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from exact_backfills.checks.base import Check, Outcome, Record

PUBLISHED_BY_DEADLINE = "published_by_deadline"

DEADLINE = Check(
    PUBLISHED_BY_DEADLINE,
    "Fails on a day first published after its deadline (the calendar's publish_by after the day's end in the "
    "pipeline's timezone; a write before the day ended does not publish it), or not published when its deadline has "
    "passed. Metadata: deadline, first_published, late_by, why (its rows landed after the deadline, or they landed in "
    "time and its run was late). A day due before the table was first published is its history and passes.",
)


@dataclass(frozen=True)
class Published(Record):
    SUMMARY = ("late_by", "why")

    deadline: str
    first_published: str | None = None
    late_by: str | None = None
    why: str | None = None


def outcome(
    day: date,
    deadline: datetime,
    first_published: datetime | None,
    landed: datetime | None,
    now: datetime,
    table_first_published: datetime | None = None,
) -> Outcome:
    """`day` at `now`, first published at `first_published` (None: not yet), its newest rows landed at `landed`
    (None: unknown, or nothing landed), its table's first day published at `table_first_published` (None: none yet)."""
    if table_first_published is not None and deadline < table_first_published:
        why = f"due before the table was first published ({_utc(table_first_published)}): its history, not late"
        first = None if first_published is None else _utc(first_published)
        return DEADLINE.outcome(day, True, Published(_utc(deadline), first, why=why))
    if first_published is None:
        if now <= deadline:
            return DEADLINE.outcome(day, True, Published(_utc(deadline), why="not published yet, not due yet"))
        why = "not published yet" + ("" if landed is None else f"; its rows landed at {_utc(landed)}")
        return DEADLINE.outcome(day, False, Published(_utc(deadline), late_by=_duration(now - deadline), why=why))
    first = _utc(first_published)
    if first_published <= deadline:
        return DEADLINE.outcome(day, True, Published(_utc(deadline), first))
    if landed is None:  # a table whose rows carry no load time (all but an events source's staging table)
        why = "its run published it after the deadline (when its rows landed: its staging table's result says)"
    elif landed > deadline:
        why = f"its rows landed at {_utc(landed)}, after the deadline"
    else:
        why = "its rows landed in time; its run published it late (queued behind others, failed, or not run)"
    return DEADLINE.outcome(day, False, Published(_utc(deadline), first, _duration(first_published - deadline), why))


def _utc(instant: datetime) -> str:
    return f"{instant.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def _duration(late: timedelta) -> str:
    minutes = int(late.total_seconds() // 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"
