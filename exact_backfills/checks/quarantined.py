"""quarantined_rows, a quarantine side table's one check: what it holds each day, by reason, and the landed files the
contract refused (a warning on a day with one)."""

from dataclasses import dataclass
from datetime import date

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from exact_backfills.checks.base import Check, Outcome, Record
from exact_backfills.declare import FILE_COLUMN
from exact_backfills.landing import REFUSED_FILE
from exact_backfills.quarantine import REASON

QUARANTINED = "quarantined_rows"

HELD_APART = Check(
    QUARANTINED,
    "The day's rows held in quarantine, counted by reason (metadata: quarantined_rows, by_reason), and the landed "
    "files the contract refused, unread (refused_files). Fails (a warning) on a day with a refused file: its rows are "
    "not published until it is withdrawn (`withdraw`) or landed again fixed. Rows quarantined with a reason are "
    "accounted for: `nothing_lost` of the staging table counts them.",
)


@dataclass(frozen=True)
class Quarantined(Record):
    SUMMARY = ("refused_files",)

    quarantined_rows: int
    by_reason: str
    refused_files: str
    refused_file_count: int


def quarantined(day: date, by_reason: dict[str, int], refused_files: list[str]) -> Outcome:
    found = Quarantined(
        sum(by_reason.values()),
        ", ".join(f"{why}={n}" for why, n in sorted(by_reason.items())),
        "; ".join(refused_files),
        len(refused_files),
    )
    return HELD_APART.outcome(day, not refused_files, found)


def quarantine_outcomes(rows: DataFrame, day_column: str, days: list[date]) -> list[Outcome]:
    """quarantined_rows on each of `days` of a quarantine table's `rows`: how many, by reason, and the refused files
    (failing on a day that has one)."""
    found: dict[date, dict[str, int]] = {}
    refused: dict[date, list[str]] = {}
    for r in (
        rows.groupBy(F.col(day_column).alias("day"), REASON)
        .agg(F.count(F.lit(1)).alias("rows"), F.collect_set(FILE_COLUMN).alias("files"))
        .collect()
    ):
        why = str(r[REASON])
        if why.startswith(REFUSED_FILE):
            refused.setdefault(r.day, []).extend(sorted(str(f) for f in r.files))
            why = REFUSED_FILE
        found.setdefault(r.day, {})[why] = found.get(r.day, {}).get(why, 0) + r.rows
    return [quarantined(day, found.get(day, {}), sorted(refused.get(day, []))) for day in days]
