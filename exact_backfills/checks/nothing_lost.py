"""nothing_lost (blocking): every key whose latest landed version falls on a day is in the table or in quarantine."""

from dataclasses import dataclass
from datetime import date

from pyspark.sql import DataFrame, Row

from exact_backfills.checks.base import SAMPLE_SIZE, Check, Outcome, Record
from exact_backfills.declare import Declared, Staging

NOTHING_LOST = "nothing_lost"

LOST = Check(
    NOTHING_LOST,
    "Every key whose latest landed version falls on the day is in the table or in quarantine (on a day held since a "
    "rollback, what landed is left out on purpose: metadata `held`, and who held it and why).",
    blocking=True,
)


@dataclass(frozen=True)
class MissingKeys(Record):
    SUMMARY = ("missing_keys", "sample_missing_keys")

    missing_keys: int | None = None
    sample_missing_keys: str | None = None
    held: bool | None = None  # held since a rollback: what landed is left out on purpose
    why: str | None = None


def checks_nothing_lost(table: Declared) -> bool:
    """Nothing lost is checked where an events source is read: landing -> staging + quarantine. A table reconciling
    with staging then carries it on, so a key cannot vanish anywhere without a check failing."""
    return isinstance(table, Staging) and table.events


def nothing_lost(day: date, missing: list[Row], key: list[str]) -> Outcome:
    sample = "; ".join(", ".join(f"{k}={m[k]}" for k in key) for m in missing[:SAMPLE_SIZE])
    return LOST.outcome(day, not missing, MissingKeys(len(missing), sample))


def outcomes(lost: DataFrame, key: list[str], days: list[date]) -> list[Outcome]:
    """nothing_lost on each of `days`, from the keys `lost` finds missing (by their day)."""
    by_day: dict[date, list[Row]] = {}
    for r in lost.collect():
        by_day.setdefault(r.day, []).append(r)
    return [nothing_lost(day, by_day.get(day, []), key) for day in days]


def held(day: date, why: str, found: Outcome | None = None) -> Outcome:
    """On a day held since a rollback: passed, what landed left out as the operator wants it (with what was found
    missing, when it was evaluated)."""
    missing = found.record if found is not None and isinstance(found.record, MissingKeys) else MissingKeys()
    return LOST.outcome(day, True, MissingKeys(missing.missing_keys, missing.sample_missing_keys, True, why))
