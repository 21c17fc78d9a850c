"""up_to_date_with_landing: a day is up to date unless its landing changed after it was written. Its outcomes are
made here alone, for every way a day can be found: just written, stale (the late-data detection), held since a
rollback, left behind by a run that changed the days it is built from, or not committed by a run that failed after
committing other tables."""

from dataclasses import dataclass
from datetime import date

from exact_backfills.checks.base import Check, Outcome, Record
from exact_backfills.dependencies import DayChange

UP_TO_DATE = "up_to_date_with_landing"

FRESH = Check(
    UP_TO_DATE,
    "Fails on a day whose landing data changed after it was written (late or corrected rows, a product version), as "
    "found by the late-data detection (restate_late_data or preview_late_data); passes when the day is rewritten. "
    "Metadata: why, and which batches; on a day held since a rollback, `held`, who held it and why.",
)


@dataclass(frozen=True)
class Landing(Record):
    stale: bool
    why: str | None = None
    batches: str | None = None  # the landed batches that made the day stale
    held: bool | None = None  # held since a rollback: what landed is left out until it is released


def up_to_date(day: date) -> Outcome:
    """Just written, from what has landed."""
    return FRESH.outcome(day, True, Landing(stale=False))


def stale(day: date, change: DayChange, with_batches: bool = False) -> Outcome:
    """Its landing changed after it was written (`with_batches`: naming the batches)."""
    batches = ", ".join(sorted(change.batches)) if with_batches else None
    return FRESH.outcome(day, False, Landing(stale=True, why=change.describe(), batches=batches))


def held(day: date, why: str) -> Outcome:
    """Held since a rollback: as the operator wants it, what landed for it left out until released."""
    return FRESH.outcome(day, True, Landing(stale=False, why=why, held=True))


def left_behind(day: date, table: str) -> Outcome:
    """Built from days of `table` a run changed, outside the run's days: stale until the next restatement."""
    return FRESH.outcome(day, False, Landing(stale=True, why=left_behind_why(table)))


def left_behind_why(table: str) -> str:
    """Why a day built from days a run changed of `table`, outside the run's days, is stale."""
    return f"built from days of {table} this run changed, outside its days: pending for the next restatement"


def partly_published(day: date, operation: str, committed: list[str], table: str) -> Outcome:
    """Not committed by a run that failed after committing other tables: behind until the day is run again."""
    why = f"the {operation} failed after committing {', '.join(committed)}, not {table}: run these days again"
    return FRESH.outcome(day, False, Landing(stale=True, why=why))
