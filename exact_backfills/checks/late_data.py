"""late_data_outside_window (an error when failing): a day that received rows older than the restatement window is
not restated automatically; backfilling it by hand publishes them and makes it pass. One record whoever finds it:
the write that publishes the day, the late-data detection before anything is written, or a checks-only run."""

from dataclasses import dataclass
from datetime import date

from exact_backfills.checks.base import Check, Outcome, Record
from exact_backfills.declare import Declared, Staging
from exact_backfills.dependencies import DayChange

LATE_DATA = "late_data_outside_window"

LATE = Check(
    LATE_DATA,
    "Fails on a day that received rows older than the restatement window (RESTATEMENT_WINDOW_DAYS): not restated "
    "automatically; backfill the day by hand, which makes it pass.",
    error_when_failing=True,
)


@dataclass(frozen=True)
class LateRows(Record):
    late_rows_unpublished: bool  # the day holds late rows older than the window that are not published
    late_rows: int | None = None  # how many, where counted
    batches: str | None = None
    why: str | None = None
    window_start: str | None = None
    action: str | None = None  # what to run to publish them
    resolved_by_run: str | None = None  # the run that published them, settling the day's exception


def publishes_late_rows(table: Declared) -> bool:
    """The table takes a source into the lake: late_data_outside_window on its days, and publishing a day from every
    batch that can hold it resolves the day's late-data exceptions."""
    return isinstance(table, Staging)


def none_late(day: date) -> Outcome:
    return LATE.outcome(day, True, LateRows(False, late_rows=0))


def written(day: date, rows: int, batches: str, resolved_by_run: str | None) -> Outcome:
    """Just written, on a day with an open exception: passed when this write published its rows (`resolved_by_run`),
    failed when it left them unpublished."""
    found = LateRows(resolved_by_run is None, rows, batches, resolved_by_run=resolved_by_run)
    return LATE.outcome(day, resolved_by_run is not None, found)


def outside_window(
    day: date, change: DayChange, window_start: date | None = None, action: str | None = None
) -> Outcome:
    """Found by the late-data detection: late rows older than the window, unpublished (saying what to run)."""
    since = str(window_start) if window_start is not None else None
    found = LateRows(True, change.rows, ", ".join(sorted(change.batches)), change.describe(), since, action)
    return LATE.outcome(day, False, found)
