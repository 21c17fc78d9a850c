"""What the checks find of a day's rows, in one pass grouped by day: rows, distinct keys, null keys, the measures
asked for, and the day's fingerprint (the same one the content checks, the audit and `compare` use)."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from functools import reduce
from typing import Any, TypeVar

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import MapType

from exact_backfills.checks.base import SAMPLE_SIZE, Outcome
from resources.audit import DayContent

K = TypeVar("K")

# A day's fingerprint is built from a hash of each row without sorting the day's rows: four 64-bit xxHash64 of the
# row's typed values (each seeded by its position), with a mask of its null columns (Spark's hash skips a null), are
# split into eight 32-bit halves, which are summed per day as 64-bit integers (exact up to 2^31 rows a day; a sum does
# not depend on the rows' order); the fingerprint is the SHA-256 of the row count and the eight sums. Equal rows (as
# a multiset, duplicates counted) give equal fingerprints whatever their order. Different rows give the same one only
# if all eight sums agree: for rows not built to collide, a chance of the order of 2^-256 (sums of hashes are no
# defence against rows crafted to collide). Values are hashed as they are typed: casting each to text first costs more
# than the rest of a day's checks.
_HASHES = 4
_MASK_BITS = 62


def _hashed(df: DataFrame) -> list[Column]:
    """The row as its hash takes it: each column in the order of their names (a map, which Spark does not hash, as its
    text), then which of them are null, as bits of longs."""
    fields = sorted(df.schema.fields, key=lambda f: f.name)
    values = [F.col(f.name).cast("string") if isinstance(f.dataType, MapType) else F.col(f.name) for f in fields]
    masks = []
    for start in range(0, len(fields), _MASK_BITS):
        bits = [
            F.when(F.col(f.name).isNull(), F.lit(1 << bit)).otherwise(F.lit(0))
            for bit, f in enumerate(fields[start : start + _MASK_BITS])
        ]
        masks.append(sum(bits, F.lit(0).cast("long")))
    return [*values, *masks]


def _hash_part_sums(df: DataFrame) -> list[Column]:
    values = _hashed(df)
    sums = []
    for i in range(_HASHES):
        h = F.xxhash64(F.lit(i), *values)
        sums += [F.sum(F.shiftrightunsigned(h, 32)), F.sum(h.bitwiseAND(F.lit(0xFFFFFFFF)))]
    return [total.alias(f"_hash_sum{i}") for i, total in enumerate(sums)]


def _fingerprint(rows: Column) -> Column:
    parts = [F.col(f"_hash_sum{i}").cast("string") for i in range(2 * _HASHES)]
    return F.sha2(F.concat_ws(":", rows.cast("string"), *parts), 256)


@dataclass(frozen=True)
class DayProfile:
    """What the checks found of one day's rows."""

    rows: int
    distinct_keys: int
    null_key_rows: int
    fingerprint: str | None
    measures: dict[str, Any] = field(default_factory=dict)  # the reconciliation's measures over the day's rows

    @property
    def duplicate_rows(self) -> int:
        return self.rows - self.distinct_keys

    @property
    def duplicate_per_1k(self) -> float:
        return round(1000 * self.duplicate_rows / self.rows, 3) if self.rows else 0.0

    @property
    def content(self) -> DayContent:
        return DayContent(self.rows, self.fingerprint)


NO_ROWS = DayProfile(rows=0, distinct_keys=0, null_key_rows=0, fingerprint=None)


@dataclass
class Verified:
    """The blocking checks' results on a table's days, with each day's profile and its reconciliation mismatches."""

    outcomes: list[Outcome]
    profiles: dict[date, DayProfile]
    mismatches: dict[date, int] = field(default_factory=dict)  # per day: how many measures differ from the upstream's
    # Per table reconciling with this one (`downstream` of evaluate_blocking), per day: its upstream measures over
    # these rows.
    for_downstream: dict[str, dict[date, dict[str, Any]]] = field(default_factory=dict)

    @property
    def failing(self) -> list[Outcome]:
        """The blocking checks failing: what refuses a change."""
        return [o for o in self.outcomes if not o.passed and o.blocking]

    def profile(self, day: date) -> DayProfile:
        return self.profiles.get(day, NO_ROWS)


def day_profile(df: DataFrame, key: list[str], day_column: str, measures: list[tuple[str, Column]]) -> DataFrame:
    """Per day, in one pass: rows, distinct keys, rows with a null key, the reconciliation measures and the
    fingerprint."""
    null_key = (
        F.greatest(*[F.col(c).isNull().cast("int") for c in key])
        if len(key) > 1
        else F.col(key[0]).isNull().cast("int")
    )
    distinct_keys = distinct_keys_by_day(df, key, day_column)
    return (
        df.groupBy(F.col(day_column).alias("day"))
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.sum(null_key).alias("null_key_rows"),
            *[expr.alias(name) for name, expr in measures],
            *_hash_part_sums(df),
        )
        .withColumn("fingerprint", _fingerprint(F.col("rows")))
        .join(distinct_keys, "day", "left")
        .withColumn("distinct_keys", F.coalesce(F.col("distinct_keys"), F.lit(0)))
    )


def distinct_keys_by_day(df: DataFrame, key: list[str], day_column: str) -> DataFrame:
    """Per day with a key: how many distinct keys (null keys left out).

    A pass of its own: beside the profile's aggregates a distinct count makes Spark expand every row once per aggregate
    group. Each key's first row is numbered rather than the keys aggregated: on rows held by day Spark sorts each
    partition and keeps one row per key (a group limit), where a hash aggregation of every key of a partition spills."""
    first = F.row_number().over(Window.partitionBy("day", *key).orderBy("day"))
    return (
        df.dropna(subset=key)
        .select(F.col(day_column).alias("day"), *key)
        .withColumn("_first_of_key", first)
        .where(F.col("_first_of_key") == 1)
        .groupBy("day")
        .agg(F.count(F.lit(1)).alias("distinct_keys"))
    )


def day_fingerprints(df: DataFrame, day_column: str) -> DataFrame:
    """Per day: rows and the fingerprint of the day's rows, the one the checks record."""
    return (
        df.groupBy(F.col(day_column).alias("day"))
        .agg(F.count(F.lit(1)).alias("rows"), *_hash_part_sums(df))
        .select("day", "rows", _fingerprint(F.col("rows")).alias("fingerprint"))
    )


def day_contents(df: DataFrame, day_column: str) -> dict[date, DayContent]:
    """day -> rows and fingerprint of `df`'s rows: the same fingerprint the checks record."""
    return {r.day: DayContent(r.rows, r.fingerprint) for r in day_fingerprints(df, day_column).collect()}


def day_contents_of(frames: Mapping[K, tuple[DataFrame, str]]) -> dict[K, dict[date, DayContent]]:
    """`day_contents` of each frame (its rows, their day column), in one Spark job: a job each, over Spark Connect a
    round trip each, was most of what comparing a few days of a few tables cost."""
    names = list(frames)
    found: dict[K, dict[date, DayContent]] = {label: {} for label in names}
    parts = [
        day_fingerprints(df, column).withColumn("_frame", F.lit(i)) for i, (df, column) in enumerate(frames.values())
    ]
    for r in reduce(DataFrame.unionByName, parts).collect() if parts else []:
        found[names[r._frame]][r.day] = DayContent(r.rows, r.fingerprint)
    return found


def duplicate_samples(df: DataFrame, key: list[str], day_column: str, days: list[date]) -> dict[date, list[str]]:
    dups = df.where(F.col(day_column).isin(days)).groupBy(day_column, *key).count().where("count > 1").collect()
    samples: dict[date, list[str]] = {}
    for r in dups:
        keys = samples.setdefault(r[day_column], [])
        if len(keys) < SAMPLE_SIZE:
            keys.append(", ".join(f"{k}={r[k]}" for k in key))
    return samples
