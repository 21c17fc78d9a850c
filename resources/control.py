"""Control tables of the late-data restatement (Delta, like every table): the watermark and the late-data exceptions.

`etl_watermark` holds one row per pipeline: the highest landing load time (`ingested_at`) whose rows are published,
the batches already read, and the days of a restatement that started but has not finished (an intent log: they are
rewritten again by the next restatement, so a crash leads to reprocessing, never to skipped rows).

`late_data_exceptions` holds one row per day that received late rows older than the restatement window: not restated
automatically, waiting for a manual backfill, which resolves it.

`held_days` holds one row per day rolled back: restatements leave it as it is (a rollback is not undone by the next
tick) until the operator releases it.
"""

import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import NamedTuple

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from resources.delta_io import day_filter, day_predicate, delta_path, table_exists
from resources.lake import table_path

WATERMARK_TABLE = "etl_watermark"
EXCEPTIONS_TABLE = "late_data_exceptions"

WATERMARK_SCHEMA = T.StructType(
    [
        T.StructField("pipeline", T.StringType(), False),
        T.StructField("watermark_ts", T.TimestampType()),
        T.StructField("batches_read", T.ArrayType(T.StringType())),
        T.StructField("pending_days", T.ArrayType(T.DateType())),
        T.StructField("updated_at", T.TimestampType()),
        T.StructField("run_id", T.StringType()),
    ]
)

# One row per day rolled back and held, until released (`resolved_at`): restatements leave held days as they are.
HOLDS_TABLE = "held_days"
HOLDS_SCHEMA = T.StructType(
    [
        T.StructField("day", T.DateType(), False),
        T.StructField("why", T.StringType()),
        T.StructField("batches", T.StringType()),  # the landed batches with rows on the day when it was held
        T.StructField("held_at", T.TimestampType()),
        T.StructField("held_by_run", T.StringType()),
        T.StructField("resolved_at", T.TimestampType()),
        T.StructField("resolved_by_run", T.StringType()),
    ]
)

EXCEPTIONS_SCHEMA = T.StructType(
    [
        T.StructField("day", T.DateType(), False),
        T.StructField("rows", T.LongType()),
        T.StructField("batches", T.StringType()),
        T.StructField("window_start", T.DateType()),
        T.StructField("detected_at", T.TimestampType()),
        T.StructField("detected_by_run", T.StringType()),
        T.StructField("resolved_at", T.TimestampType()),
        T.StructField("resolved_by_run", T.StringType()),
    ]
)


@dataclass
class Watermark:
    watermark_ts: datetime | None = None
    batches_read: list[str] = field(default_factory=list)
    pending_days: list[date] = field(default_factory=list)


def read_watermark(spark: SparkSession, pipeline: str) -> Watermark:
    if not table_exists(WATERMARK_TABLE):
        return Watermark()
    rows = spark.read.format("delta").load(table_path(WATERMARK_TABLE)).where(F.col("pipeline") == pipeline).collect()
    if not rows:
        return Watermark()
    r = rows[0]
    return Watermark(r.watermark_ts, list(r.batches_read or []), list(r.pending_days or []))


def write_watermark(spark: SparkSession, pipeline: str, wm: Watermark, run_id: str, now: datetime) -> None:
    """Replace the pipeline's row in one commit."""
    row = (pipeline, wm.watermark_ts, sorted(wm.batches_read), sorted(wm.pending_days), now, run_id)
    (
        spark.createDataFrame([row], WATERMARK_SCHEMA)
        .write.format("delta")
        .mode("overwrite")
        .option("replaceWhere", f"pipeline = '{pipeline}'")
        .save(table_path(WATERMARK_TABLE))
    )


def _upsert_open(spark: SparkSession, table: str, new: DataFrame, updated: list[str]) -> None:
    """Add `new`'s rows to `table` (one row per day): a day's open row (not resolved) gets the `updated` columns of
    its new row instead of a second row."""
    path = table_path(table)
    if not table_exists(table):
        new.write.format("delta").save(path)
        return
    view = f"{table}_{uuid.uuid4().hex[:12]}"
    new.createOrReplaceTempView(view)
    try:
        spark.sql(
            f"MERGE INTO {delta_path(path)} t USING {view} s ON t.day = s.day AND t.resolved_at IS NULL "
            f"WHEN MATCHED THEN UPDATE SET {', '.join(f'{c} = s.{c}' for c in updated)} WHEN NOT MATCHED THEN INSERT *"
        )
    finally:
        spark.catalog.dropTempView(view)


def _open(spark: SparkSession, table: str, days: list[date] | None) -> list:
    """A control table's open rows (not resolved), oldest day first (only those of `days` when given)."""
    if not table_exists(table):
        return []
    df = spark.read.format("delta").load(table_path(table)).where("resolved_at IS NULL")
    if days is not None:
        df = df.where(day_filter("day", days))
    return df.orderBy("day").collect()


def _resolve(spark: SparkSession, table: str, days: list[date], run_id: str, now: datetime) -> None:
    if not days or not table_exists(table):
        return
    # Literals, not parameters: Delta's UPDATE does not take parameters in SET. The session's time zone is UTC.
    at = now.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    by = run_id.replace("\\", "\\\\").replace("'", "\\'")
    spark.sql(
        f"UPDATE {delta_path(table_path(table))} SET resolved_at = TIMESTAMP '{at}', resolved_by_run = '{by}' "
        f"WHERE resolved_at IS NULL AND ({day_predicate('day', days)})"
    )


def record_exceptions(
    spark: SparkSession, rows: list[tuple[date, int, str, date | None]], run_id: str, now: datetime
) -> None:
    """Upsert (day, rows, batches, window_start): an open exception for a day is updated, not duplicated, and left
    as it is when it already says the same (a replayed batch commits nothing)."""
    if rows:
        recorded = {(e.day, e.rows, e.batches, e.window_start) for e in open_exceptions(spark, [r[0] for r in rows])}
        rows = [r for r in rows if tuple(r) not in recorded]
    if rows:
        new = spark.createDataFrame([(d, n, b, w, now, run_id, None, None) for d, n, b, w in rows], EXCEPTIONS_SCHEMA)
        _upsert_open(spark, EXCEPTIONS_TABLE, new, ["rows", "batches", "window_start"])


def open_exceptions(spark: SparkSession, days: list[date] | None = None) -> list:
    """Unresolved exceptions, oldest day first (only those of `days` when given)."""
    return _open(spark, EXCEPTIONS_TABLE, days)


def resolve_exceptions(spark: SparkSession, days: list[date], run_id: str, now: datetime) -> None:
    """The days were rewritten from the whole landing: their late rows are now published."""
    _resolve(spark, EXCEPTIONS_TABLE, days, run_id, now)


class HeldDay(NamedTuple):
    """A day rolled back and held: restatements leave it as it is until it is released."""

    day: date
    why: str
    batches: str  # the landed batches with rows on the day when it was held
    held_at: datetime
    held_by_run: str

    def describe(self) -> str:
        """Who held the day, when and why, and the landed batches with rows on it then."""
        return (
            f"{self.day} held since {self.held_at:%Y-%m-%d %H:%M} UTC by run {self.held_by_run} "
            f"({self.why}; landed batches with rows on it: {self.batches or 'none'})"
        )


def hold_days(spark: SparkSession, days: list[date], why: str, batches: str, run_id: str, now: datetime) -> None:
    """Hold `days` (rolled back): no restatement rewrites them until they are released."""
    new = spark.createDataFrame([(d, why, batches, now, run_id, None, None) for d in days], HOLDS_SCHEMA)
    _upsert_open(spark, HOLDS_TABLE, new, ["why", "batches", "held_at", "held_by_run"])


def open_holds(spark: SparkSession, days: list[date] | None = None) -> list[HeldDay]:
    """Days held, oldest first (only those of `days` when given)."""
    return [HeldDay(r.day, r.why, r.batches, r.held_at, r.held_by_run) for r in _open(spark, HOLDS_TABLE, days)]


def release_holds(spark: SparkSession, days: list[date], run_id: str, now: datetime) -> None:
    _resolve(spark, HOLDS_TABLE, days, run_id, now)


# One row per plan for a code change (assets_pkg/plans.py): its document, open until promoted or dropped.
PLANS_TABLE = "code_change_plans"
PLANS_SCHEMA = T.StructType(
    [
        T.StructField("plan_id", T.StringType(), False),
        T.StructField("created_at", T.TimestampType()),
        T.StructField("document", T.StringType()),  # the plan, as JSON
        T.StructField("status", T.StringType()),  # open, promoted, dropped
        T.StructField("resolved_at", T.TimestampType()),
        T.StructField("resolved_by_run", T.StringType()),
    ]
)


def record_plan(spark: SparkSession, plan_id: str, document: str, now: datetime) -> None:
    row = (plan_id, now, document, "open", None, None)
    spark.createDataFrame([row], PLANS_SCHEMA).write.format("delta").mode("append").save(table_path(PLANS_TABLE))


def read_plan(spark: SparkSession, plan_id: str) -> tuple[str, str] | None:
    """(document, status) of a plan, None when there is no such plan."""
    if not table_exists(PLANS_TABLE):
        return None
    rows = spark.read.format("delta").load(table_path(PLANS_TABLE)).where(F.col("plan_id") == plan_id).collect()
    return (rows[0].document, rows[0].status) if rows else None


def resolve_plan(spark: SparkSession, plan_id: str, status: str, run_id: str, now: datetime) -> None:
    at = now.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    spark.sql(
        f"UPDATE {delta_path(table_path(PLANS_TABLE))} SET status = '{status}', resolved_at = TIMESTAMP '{at}', "
        f"resolved_by_run = '{_quoted(run_id)}' WHERE plan_id = '{_quoted(plan_id)}' AND status = 'open'"
    )


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")
