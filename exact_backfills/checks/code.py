"""built_by_current_code: a day is built by the code loaded now, or it is stale by code (built by an older version
of its table's code, or from such a day of a table it reads)."""

from dataclasses import dataclass
from datetime import date

from exact_backfills.checks.base import Check, Outcome, Record
from exact_backfills.dependencies import CodeChange

BUILT_BY_CURRENT_CODE = "built_by_current_code"

CURRENT_CODE = Check(
    BUILT_BY_CURRENT_CODE,
    "Fails on a day built by an older version of the table's code, or built from such a day of a table it reads "
    "(code versions are derived from the code: a change to a transform makes exactly its days, and the days built "
    "from them, stale). Passes when the day is written by the code loaded now. Metadata: why.",
)


@dataclass(frozen=True)
class BuiltBy(Record):
    current_code_version: str
    code_version: str | None = None  # the version that built the day's rows, where known ("" when unrecorded)
    why: str | None = None


def written(day: date, table: str, built: str | None, current: str) -> Outcome:
    """Just written: by the code loaded now, unless the rows are restored ones an older version built."""
    why = None if built == current else f"{table}: restored rows built by code {built or 'unrecorded'}, not {current}"
    return CURRENT_CODE.outcome(day, built == current, BuiltBy(current, built or "", why))


def published(day: date, current: str, stale: CodeChange | None) -> Outcome:
    """What is published: failing, saying why, on a day stale by code."""
    return CURRENT_CODE.outcome(day, stale is None, BuiltBy(current, why=stale.describe() if stale else None))


def unchanged_by_plan(day: date, current: str, plan_id: str) -> Outcome:
    """A day a promoted plan found unchanged by the new code: current, though not rewritten."""
    return CURRENT_CODE.outcome(day, True, BuiltBy(current, why=f"unchanged by plan {plan_id}: not rewritten"))
