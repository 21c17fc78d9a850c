"""The rollback horizon (ROLLBACK_HORIZON_DAYS, 30 days by default): how far back a rollback may restore, from one
setting. Every table keeps its Delta log and the files of its older versions that long (its table properties, which
the vacuum sets; not a session default, which the warm engine would have to restart for); the vacuum, a job with
its nightly schedule, removes the files older than that; and a rollback to a version whose files the vacuum
may have removed is refused before anything is written, in one line saying so.

A version's files are kept while the commit that replaced it is within the horizon (a file is removed from disk only
once it has been out of the table for longer), and so is its log (Delta keeps each version after the newest
checkpoint older than the retention): that commit's time alone decides."""

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from exact_backfills import clock
from exact_backfills.declare import Pipeline
from resources import audit
from resources.delta_io import delta_path, table_exists, table_properties
from resources.lake import control_path, table_path
from resources.settings import settings

RETENTION_PROPERTIES = ("delta.logRetentionDuration", "delta.deletedFileRetentionDuration")


def horizon() -> timedelta:
    return timedelta(days=settings().rollback_horizon_days)


def _retention() -> str:
    return f"interval {settings().rollback_horizon_days} days"


def replaced_at(spark: SparkSession, table: str, version: int) -> datetime | None:
    """When the commit after `version` of `table` was made (None: `version` is the latest)."""
    found = (
        spark.sql(f"DESCRIBE HISTORY {delta_path(table_path(table))}")
        .where(F.col("version") == version + 1)
        .select(F.unix_timestamp("timestamp").alias("at"))  # epoch seconds: no local timezone on the way
        .collect()
    )
    return datetime.fromtimestamp(found[0]["at"], UTC) if found else None


# Delta's own, for a table that does not set them: it refuses to time travel past the first.
DELTA_DEFAULTS = {
    "delta.deletedFileRetentionDuration": timedelta(days=7),
    "delta.logRetentionDuration": timedelta(days=30),
}
_UNITS = {
    "week": timedelta(weeks=1),
    "day": timedelta(days=1),
    "hour": timedelta(hours=1),
    "minute": timedelta(minutes=1),
}


def table_retention(properties: dict[str, str]) -> timedelta:
    """How far back a table's own properties let it travel: the shorter of its file and log retention."""
    return min(_interval(properties.get(p), DELTA_DEFAULTS[p]) for p in RETENTION_PROPERTIES)


def _interval(text: str | None, default: timedelta) -> timedelta:
    """A Delta interval ('interval 30 days', '168 HOURS'); the default when unset, shorter when unreadable."""
    words = (text or "").lower().replace("interval", "").split()
    if len(words) != 2 or not words[0].isdigit() or words[1].rstrip("s") not in _UNITS:
        return default if text is None else timedelta(0)
    return int(words[0]) * _UNITS[words[1].rstrip("s")]


def refuse_beyond_horizon(spark: SparkSession, table: str, version: int) -> None:
    """ValueError, in one line, when restoring `table` to `version` reaches past the rollback horizon, or past the
    retention the table itself still has (made before it had the horizon's, and not vacuumed since)."""
    if version < 0 or not table_exists(table):
        return
    replaced = replaced_at(spark, table, version)
    if replaced is None:
        return
    own = table_retention(_properties(spark, table))
    if replaced < clock.now() - horizon():
        reach = f"the rollback horizon of {settings().rollback_horizon_days} days (ROLLBACK_HORIZON_DAYS)"
    elif replaced < clock.now() - own:
        reach = f"{table}'s own retention of {own.days} days (`vacuum` sets it to ROLLBACK_HORIZON_DAYS)"
    else:
        return
    raise ValueError(
        f"{table} version {version} was replaced on {replaced:%Y-%m-%d}, beyond {reach}: its files may be vacuumed; "
        "rebuild the days from the landing instead (backfill)"
    )


def _properties(spark: SparkSession, table: str) -> dict[str, str]:
    return table_properties(spark, table_path(table))


@dataclass(frozen=True)
class Vacuumed:
    """What the vacuum did to a table: whether it set its retention to the horizon, and the files it removed."""

    table: str
    retention_set: bool
    files_removed: int
    compacted: audit.Compacted | None = None  # the audit trail's, merged before it is vacuumed

    def describe(self) -> str:
        retention = f"retention set to {_retention()}; " if self.retention_set else ""
        merged = f"{self.compacted.describe()}; " if self.compacted else ""
        return f"{self.table}: {merged}{retention}{self.files_removed} file(s) older than the horizon removed"


# VACUUM lists a table's folders as a job of this many tasks, Spark's default 10,000: 12 s for a table of 90 small
# day folders on two cores, 1.6 s with 8.
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
LISTING_TASKS = "8"


def vacuum(spark: SparkSession, pipeline: Pipeline) -> list[Vacuumed]:
    """Every table of `pipeline` that exists, and its audit trail once its small files are merged
    (audit.keep_compact): its retention set to the horizon, then vacuumed under it."""
    before = spark.conf.get(LISTING_PARALLELISM)
    spark.conf.set(LISTING_PARALLELISM, LISTING_TASKS)  # the session's own: a warm engine's other clients keep theirs
    try:
        done = [_vacuum(spark, table, table_path(table)) for table in pipeline.every_table if table_exists(table)]
        compacted = audit.keep_compact(spark, pipeline.name)
        if compacted is not None:
            trail = _vacuum(spark, audit.AUDIT_TABLE, control_path(pipeline.name, audit.AUDIT_TABLE))
            done.append(replace(trail, compacted=compacted))
        return done
    finally:
        if before is None:
            spark.conf.unset(LISTING_PARALLELISM)
        else:
            spark.conf.set(LISTING_PARALLELISM, before)


def _vacuum(spark: SparkSession, table: str, at: str) -> Vacuumed:
    path = delta_path(at)
    properties, retention = table_properties(spark, at), _retention()
    retention_set = any(properties.get(p) != retention for p in RETENTION_PROPERTIES)
    if retention_set:
        assigned = ", ".join(f"'{p}' = '{retention}'" for p in RETENTION_PROPERTIES)
        spark.sql(f"ALTER TABLE {path} SET TBLPROPERTIES ({assigned})")
    hours = settings().rollback_horizon_days * 24
    spark.sql(f"VACUUM {path} RETAIN {hours} HOURS")
    ended = (
        spark.sql(f"DESCRIBE HISTORY {path} LIMIT 5")
        .where(F.col("operation") == "VACUUM END")
        .select(F.col("operationMetrics")["numDeletedFiles"].alias("removed"))
        .collect()
    )
    return Vacuumed(table, retention_set, int(ended[0]["removed"] or 0) if ended else 0)
