"""Deterministic demo landing data for the ML pipeline: the same seed gives the same batches.

It exercises what an ML engineer's tables must survive: events delivered twice (a retry lands the same event_id
again), events landing days late, user status changes (some landing late), labels landing two to three weeks after
their day and a few over a hundred days after (beyond the restatement window), and, only when asked, bad events."""

import random
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from exact_backfills.landing import land
from examples.ml_features.sources import APP_EVENTS, EVENT_TYPES, LABELS, USER_STATUS

STATUS_AFTER = {"trial": "active", "active": "churned", "churned": "active"}


@dataclass
class Landed:
    events: int = 0
    retries: int = 0
    late_events: int = 0
    bad_events: int = 0
    status_changes: int = 0
    late_status_changes: int = 0
    labels: int = 0
    very_late_labels: int = 0
    batches: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return (
            f"landed {self.events} app events in {len(self.batches)} batches ({self.retries} retries, "
            f"{self.late_events} late, {self.bad_events} bad), {self.status_changes} user status changes "
            f"({self.late_status_changes} late) and {self.labels} labels ({self.very_late_labels} landing over 100 "
            "days late)"
        )


def _at(day: date, hour: int, minute: int = 0) -> datetime:
    return datetime.combine(day, time(hour, minute), tzinfo=UTC)


def _rows(schema: T.StructType) -> T.StructType:
    # Bad rows break the contract on purpose (a null user): the files themselves carry no NOT NULL constraint.
    return T.StructType(
        [T.StructField(f.name, f.dataType, True) for f in schema.fields] + [T.StructField("ingest_date", T.DateType())]
    )


def _spoil(rng: random.Random, row: list[Any]) -> list[Any]:
    """Make one event break the contract in one of the ways quarantine must catch."""
    kind = rng.choice(["null_user", "unknown_event_type", "negative_amount"])
    if kind == "null_user":
        row[1] = None
    elif kind == "unknown_event_type":
        row[3] = "swipe"
    else:
        row[3], row[4] = "purchase", Decimal("-5.00")
    return row


def generate(
    spark: SparkSession,
    start: date,
    end: date,
    seed: int = 7,
    rows_per_day: int = 200,
    bad_rate: float = 0.0,
) -> Landed:
    if end < start:
        raise ValueError(f"--end {end} is before --start {start}")
    rng = random.Random(seed)
    users = max(8, rows_per_day // 4)
    s = Landed()
    events: list[list[Any]] = []
    purchases: set[tuple[int, date]] = set()
    active: set[tuple[int, date]] = set()
    n_days = (end - start).days + 1
    for d in range(n_days):
        day = start + timedelta(days=d)
        for i in range(rows_per_day):
            user = rng.randint(1, users)
            kind = rng.choices(EVENT_TYPES, weights=[70, 25, 5])[0]
            amount = Decimal(rng.randint(100, 9000)) / 100 if kind == "purchase" else None
            landed_on = day + timedelta(days=1)
            if rng.random() < 0.03:
                landed_on = day + timedelta(days=rng.randint(2, 8))
                s.late_events += 1
            row = [f"e{day:%Y%m%d}-{i:05d}", user, day, kind, amount, _at(landed_on, 2, rng.randint(0, 59))]
            if rng.random() < bad_rate:
                row = _spoil(rng, row)
                s.bad_events += 1
            elif kind == "purchase":
                purchases.add((user, day))
            events.append([*row, landed_on])
            if row[1] is not None:
                active.add((user, day))
            if rng.random() < 0.03:  # a retry: the same event again, landed later
                again = landed_on + timedelta(days=rng.choice([0, 1]))
                events.append([*row[:5], _at(again, 5, rng.randint(0, 59)), again])
                s.retries += 1
    s.events = len(events)

    statuses: list[list[Any]] = [[u, "trial", _at(start, 0), _at(start, 0, 1), start] for u in range(1, users + 1)]
    current = dict.fromkeys(range(1, users + 1), "trial")
    for d in range(1, n_days):
        day = start + timedelta(days=d)
        for user in range(1, users + 1):
            if rng.random() < 0.03:
                current[user] = STATUS_AFTER[current[user]]
                landed_on = day + timedelta(days=rng.choice([0, 0, 0, 1, 3]))  # some changes land late
                s.late_status_changes += landed_on > day
                statuses.append([user, current[user], _at(day, 9), _at(landed_on, 23), landed_on])
                s.status_changes += 1

    labels: list[list[Any]] = []
    for user, day in sorted(active):
        converted = any((user, day + timedelta(days=k)) in purchases for k in range(7))
        known = day + timedelta(days=14)
        landed_on = day + timedelta(days=rng.randint(14, 21))
        if rng.random() < 0.02:  # a label long overdue: beyond the restatement window
            landed_on = day + timedelta(days=rng.randint(100, 110))
            s.very_late_labels += 1
        labels.append([user, day, converted, _at(known, 6), _at(landed_on, 3), landed_on])
    s.labels = len(labels)

    landed = land(
        {
            APP_EVENTS: spark.createDataFrame(events, _rows(APP_EVENTS.schema)),
            USER_STATUS: spark.createDataFrame(statuses, _rows(USER_STATUS.schema)),
            LABELS: spark.createDataFrame(labels, _rows(LABELS.schema)),
        }
    )
    s.batches = sorted({b for batches in landed.values() for b in batches})
    return s
