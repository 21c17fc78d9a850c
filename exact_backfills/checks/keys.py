"""The key checks (blocking): at most one row per natural key on a day, and no key column null."""

from dataclasses import dataclass
from datetime import date

from exact_backfills.checks.base import Check, Outcome, Record
from exact_backfills.checks.profile import DayProfile

UNIQUE_KEY = "unique_key"
KEYS_NOT_NULL = "keys_not_null"

UNIQUE = Check(
    UNIQUE_KEY, "At most one row per natural key on the day. Metadata: duplicates per 1,000 rows.", blocking=True
)
NOT_NULL = Check(KEYS_NOT_NULL, "No key column is null.", blocking=True)


@dataclass(frozen=True)
class Duplicates(Record):
    SUMMARY = ("duplicate_rows", "sample_duplicate_keys", "rows")

    rows: int
    duplicate_rows: int
    duplicate_per_1k: float
    sample_duplicate_keys: str


@dataclass(frozen=True)
class NullKeys(Record):
    SUMMARY = ("null_key_rows",)

    null_key_rows: int
    key: str


def unique_key(day: date, profile: DayProfile, sample_keys: list[str]) -> Outcome:
    found = Duplicates(profile.rows, profile.duplicate_rows, profile.duplicate_per_1k, "; ".join(sample_keys))
    return UNIQUE.outcome(day, profile.duplicate_rows == 0, found)


def keys_not_null(day: date, profile: DayProfile, key: list[str]) -> Outcome:
    return NOT_NULL.outcome(day, profile.null_key_rows == 0, NullKeys(profile.null_key_rows, ", ".join(key)))
