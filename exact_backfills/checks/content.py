"""The content checks, recorded after a write and on what is published: the day's fingerprint and its row count,
each against the previous write of the day (the previous materialization, or what the pipeline last wrote)."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date

from exact_backfills.checks.base import Check, Outcome, Record
from exact_backfills.checks.profile import Verified
from resources.audit import DayContent
from resources.settings import settings

FINGERPRINT = "fingerprint"
ROW_COUNT_CHANGE = "row_count_change"

FINGERPRINTED = Check(
    FINGERPRINT,
    "A SHA-256 of the day's rows whatever their order, recorded on every materialization; says whether it changed.",
)
ROW_COUNT = Check(
    ROW_COUNT_CHANGE, "Row count within CHECK_ROW_COUNT_TOLERANCE of the previous materialization (warning)."
)


@dataclass(frozen=True)
class Fingerprint(Record):
    fingerprint: str
    previous_fingerprint: str
    changed: bool


@dataclass(frozen=True)
class RowCountChange(Record):
    SUMMARY = ("rows", "previous_rows", "relative_change")

    rows: int
    previous_rows: int  # -1: no previous write
    relative_change: float
    tolerance: float


def row_count_tolerance() -> float:
    """Largest accepted relative change of a day's row count against its previous materialization."""
    return settings().check_row_count_tolerance


def fingerprint_changed(now: DayContent, previous: DayContent | None) -> bool:
    return previous is not None and previous.fingerprint is not None and previous.fingerprint != now.fingerprint


def fingerprint(day: date, now: DayContent, previous: DayContent | None, fails_when_changed: bool) -> Outcome:
    changed = fingerprint_changed(now, previous)
    found = Fingerprint(now.fingerprint or "", (previous.fingerprint or "") if previous else "", changed)
    return FINGERPRINTED.outcome(day, not (changed and fails_when_changed), found)


def row_count_change(day: date, rows: int, previous_rows: int | None, tolerance: float) -> Outcome:
    change = None if not previous_rows else abs(rows - previous_rows) / previous_rows
    found = RowCountChange(
        rows,
        previous_rows if previous_rows is not None else -1,
        round(change, 4) if change is not None else 0.0,
        tolerance,
    )
    return ROW_COUNT.outcome(day, change is None or change <= tolerance, found)


def _content(
    verified: Verified, previous: Mapping[date, DayContent], days: list[date], published: bool
) -> list[Outcome]:
    tolerance = row_count_tolerance()
    outcomes = []
    for day in days:
        now, before = verified.profile(day).content, previous.get(day)
        outcomes.append(fingerprint(day, now, before, fails_when_changed=published))
        outcomes.append(row_count_change(day, now.rows, before.rows if before else None, tolerance))
    return outcomes


def evaluate_after_commit(verified: Verified, previous: Mapping[date, DayContent], days: list[date]) -> list[Outcome]:
    """Fingerprint and row-count change against each day's previous materialization."""
    return _content(verified, previous, days, published=False)


def evaluate_published(verified: Verified, recorded: Mapping[date, DayContent], days: list[date]) -> list[Outcome]:
    """Fingerprint and row count of what is published, against what the pipeline last wrote (`recorded`): a change
    behind its back fails the fingerprint."""
    return _content(verified, recorded, days, published=True)
