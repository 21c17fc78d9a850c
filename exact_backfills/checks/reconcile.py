"""reconciles_with_upstream (blocking): a table's measures on a day equal the same measures of its upstream's rows."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from exact_backfills.checks.base import Check, Outcome, Record
from exact_backfills.checks.profile import DayProfile
from exact_backfills.declare import Reconcile

RECONCILES = "reconciles_with_upstream"

RECONCILED = Check(
    RECONCILES,
    "Row count and amounts equal the upstream table's for the day. Metadata: mismatch count.",
    blocking=True,
)

Measures = Mapping[date, Mapping[str, Any]]  # day -> measure -> value


@dataclass(frozen=True)
class Mismatches(Record):
    SUMMARY = ("mismatches",)

    upstream: str
    mismatch_count: int
    mismatches: str
    mismatching_days_in_run: int


@dataclass(frozen=True)
class Differing:
    """A measure of a day that differs from the upstream's."""

    measure: str
    mine: str
    theirs: str


def upstream_measures(rec: Reconcile, upstream: DataFrame, day_column: str) -> Measures:
    """The upstream's side of each measure, per day of its rows."""
    return {
        r.day: r.asDict()
        for r in upstream.groupBy(F.col(day_column).alias("day"))
        .agg(*[F.expr(m.upstream_aggregate).alias(name) for name, m in rec.measures.items()])
        .collect()
    }


def days_read(rec: Reconcile, days: list[date]) -> list[date]:
    """The upstream's days the reconciliation of `days` compares with: each day's window."""
    return sorted({day - timedelta(days=k) for day in days for k in range(rec.window_days)})


def over_window(rec: Reconcile, by_day: Measures, days: list[date]) -> Measures:
    """Each of `days`' upstream side summed over the `window_days` days ending on it (a day without rows adds
    nothing): what a table over a trailing window reconciles with."""
    if rec.window_days == 1:
        return by_day
    window = [timedelta(days=k) for k in range(rec.window_days)]
    return {
        day: {name: sum((by_day.get(day - k, {}).get(name) or 0 for k in window), 0) for name in rec.measures}
        for day in days
    }


def differing(rec: Reconcile, profile: DayProfile, theirs: Mapping[str, Any] | None) -> list[Differing]:
    """The measures of a day (a missing value counts as 0) that differ from the upstream's."""
    found = []
    for name in rec.measures:
        a = profile.measures.get(name) or 0
        b = (theirs[name] if theirs else None) or 0
        if a != b:
            found.append(Differing(name, str(a), str(b)))
    return found


def reconciles(day: date, rec: Reconcile, diff: list[Differing], mismatching_days: int) -> Outcome:
    said = ", ".join(f"{d.measure}: {d.mine} vs {d.theirs}" for d in diff)
    return RECONCILED.outcome(day, not diff, Mismatches(rec.upstream, len(diff), said, mismatching_days))
