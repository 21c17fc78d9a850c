"""Rows of an events source that break the landing contract go to its staging table's quarantine side table with the
reason, the source file and the run: nothing is dropped silently, and a bad row never fails the pipeline.

A row is rejected, first reason first: its file was refused; a key column, its day, or its newest/load timestamps are
null; its day is outside the partitions or after its load; then each of the source's own rules, in order.

A quarantined row belongs to a day (`quarantine_day`) so that the staging run of that day rewrites it exactly: its own
day when that is a valid partition day, otherwise its landing batch's day, clamped into the partitions.
"""

from datetime import date

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from exact_backfills.calendar import Partitions
from exact_backfills.declare import BATCH_COLUMN, QUARANTINE_DAY, Source
from exact_backfills.landing import REFUSED
from resources.delta_io import day_filter

REASON = "reason"


def structural_reasons(source: Source) -> list[str]:
    """The reasons of a row with no valid day of its own: it is filed on its batch's day."""
    return [
        "null_key",
        f"null_{source.day}",
        "null_timestamp",
        f"{source.day}_out_of_range",
        f"{source.day}_after_landing",
    ]


def _reason(source: Source, partitions: Partitions) -> Column:
    c = F.col
    day = c(source.day)
    null_key = F.lit(False)
    for column in source.key:
        null_key = null_key | c(column).isNull()
    null_key_, null_day, null_timestamp, out_of_range, after_landing = structural_reasons(source)
    reason = (
        F.when(c(REFUSED).isNotNull(), c(REFUSED))  # a file the landing contract refuses (see landing.py)
        .when(null_key, null_key_)
        .when(day.isNull(), null_day)
        .when(c(source.newest).isNull() | c(source.loaded_at).isNull(), null_timestamp)
        .when((day < F.lit(partitions.first_day)) | (day > F.lit(partitions.last_day)), out_of_range)
        # the day it was loaded on, in the pipeline's timezone (east of UTC, today there is yesterday's date in UTC)
        .when(day > F.to_date(F.from_utc_timestamp(c(source.loaded_at), partitions.timezone)), after_landing)
    )
    for rule in source.rules:
        reason = reason.when(F.expr(rule.breaks), rule.reason)
    return reason


def breaks_contract(source: Source, partitions: Partitions) -> Column:
    return _reason(source, partitions).isNotNull()


def tagged(source: Source, versions: DataFrame, partitions: Partitions) -> DataFrame:
    """Landed rows with their `reason` (null: the row meets the contract) and, for a row that does not, its
    `quarantine_day`."""
    reasoned = versions.withColumn(REASON, _reason(source, partitions))
    in_partitions = F.greatest(F.least(F.col(BATCH_COLUMN), F.lit(partitions.last_day)), F.lit(partitions.first_day))
    structural = F.col(REFUSED).isNotNull() | F.col(REASON).isin(*structural_reasons(source))
    return reasoned.withColumn(
        QUARANTINE_DAY,
        F.when(F.col(REASON).isNull(), F.lit(None).cast("date"))
        .when(structural, in_partitions)
        .otherwise(F.col(source.day)),
    )


def split_tagged(rows: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(rows that meet the contract, rows that do not, with `reason` and `quarantine_day`), from `tagged` rows."""
    valid = rows.where(F.col(REASON).isNull()).drop(REASON, REFUSED, QUARANTINE_DAY)
    return valid, rows.where(F.col(REASON).isNotNull())


def split(source: Source, versions: DataFrame, partitions: Partitions) -> tuple[DataFrame, DataFrame]:
    """(rows that meet the contract, rows that do not, with `reason` and `quarantine_day`), from landed rows."""
    return split_tagged(tagged(source, versions, partitions))


def for_days(source: Source, rejected: DataFrame, days: list[date]) -> DataFrame:
    return source.as_versions(rejected.where(day_filter(QUARANTINE_DAY, days)), QUARANTINE_DAY, REASON)


def latest_landed(source: Source, versions: DataFrame, days: list[date]) -> DataFrame:
    """The day and key of each key whose latest landed version (valid or not) falls on one of `days`."""
    key = list(source.key)
    latest = Window.partitionBy(*key).orderBy(
        F.col(source.newest).desc_nulls_last(), F.col(source.loaded_at).desc_nulls_last()
    )
    return (
        versions.where(key_not_null(key))
        .withColumn("_n", F.row_number().over(latest))
        .where("_n = 1")
        .where(day_filter(source.day, days))
        .select(F.col(source.day).alias("day"), *key)
    )


def key_not_null(key: list[str]) -> Column:
    not_null = F.lit(True)
    for column in key:
        not_null = not_null & F.col(column).isNotNull()
    return not_null


def missing(key: list[str], expected: DataFrame, table: DataFrame, quarantined: DataFrame) -> DataFrame:
    """The `expected` keys (day + the key) neither in `table` nor in quarantine."""
    return expected.join(table.select(*key), key, "left_anti").join(quarantined.select(*key), key, "left_anti")


def lost_keys(
    source: Source, versions: DataFrame, table: DataFrame, quarantined: DataFrame, days: list[date]
) -> DataFrame:
    """Keys whose latest landed version (valid or not) falls on one of `days`, yet are neither in `table` nor in
    quarantine: rows that would otherwise vanish without a trace. Columns: day + the key."""
    return missing(list(source.key), latest_landed(source, versions, days), table, quarantined)
