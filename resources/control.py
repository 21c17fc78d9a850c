"""A pipeline's control tables (Delta, like every table, in its own folder: lake.control_path): the watermark, the
late-data exceptions, the days held since a rollback and the plans for code changes.

`etl_watermark` holds one row per pipeline: the highest landing load time whose rows are published, the batches
already read, and the days of each table of a restatement that started but has not finished (an intent log: they are
rewritten again by the next restatement, so a crash leads to reprocessing, never to skipped rows).

`late_data_exceptions` holds one row per table and day that received late rows older than the restatement window: not
restated automatically, waiting for a manual backfill, which resolves it.

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

from resources.delta_io import day_filter, day_predicate, delta_path, is_delta_table
from resources.lake import control_path

WATERMARK_TABLE = "etl_watermark"
EXCEPTIONS_TABLE = "late_data_exceptions"

WATERMARK_SCHEMA = T.StructType(
    [
        T.StructField("pipeline", T.StringType(), False),
        T.StructField("watermark_ts", T.TimestampType()),
        T.StructField("batches_read", T.ArrayType(T.StringType())),  # source/batch
        T.StructField(
            "pending",
            T.ArrayType(T.StructType([T.StructField("table", T.StringType()), T.StructField("day", T.DateType())])),
        ),
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
        T.StructField("table", T.StringType(), False),
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
    batches_read: list[str] = field(default_factory=list)  # source/batch
    pending: dict[str, list[date]] = field(default_factory=dict)  # table -> days of a restatement not finished

    @property
    def pending_days(self) -> list[date]:
        """Every day pending in any table."""
        return sorted({d for days in self.pending.values() for d in days})


def read_watermark(spark: SparkSession, pipeline: str) -> Watermark:
    path = control_path(pipeline, WATERMARK_TABLE)
    if not is_delta_table(path):
        return Watermark()
    rows = spark.read.format("delta").load(path).where(F.col("pipeline") == pipeline).collect()
    if not rows:
        return Watermark()
    r = rows[0]
    pending: dict[str, list[date]] = {}
    for p in r.pending or []:
        pending.setdefault(p.table, []).append(p.day)
    return Watermark(r.watermark_ts, list(r.batches_read or []), {t: sorted(d) for t, d in pending.items()})


def write_watermark(spark: SparkSession, pipeline: str, wm: Watermark, run_id: str, now: datetime) -> None:
    """Replace the pipeline's row in one commit."""
    pending = [(t, d) for t in sorted(wm.pending) for d in sorted(wm.pending[t])]
    row = (pipeline, wm.watermark_ts, sorted(wm.batches_read), pending, now, run_id)
    (
        spark.createDataFrame([row], WATERMARK_SCHEMA)
        .write.format("delta")
        .mode("overwrite")
        .option("replaceWhere", f"pipeline = '{_quoted(pipeline)}'")
        .save(control_path(pipeline, WATERMARK_TABLE))
    )


def _upsert_open(spark: SparkSession, path: str, new: DataFrame, match: list[str], updated: list[str]) -> None:
    """Add `new`'s rows to the control table at `path` (one row per `match` columns): an open row (not resolved) of
    the same `match` gets the `updated` columns of its new row instead of a second row."""
    if not is_delta_table(path):
        new.write.format("delta").save(path)
        return
    view = f"control_{uuid.uuid4().hex[:12]}"
    new.createOrReplaceTempView(view)
    on = " AND ".join(f"t.`{c}` = s.`{c}`" for c in match)
    try:
        spark.sql(
            f"MERGE INTO {delta_path(path)} t USING {view} s ON {on} AND t.resolved_at IS NULL "
            f"WHEN MATCHED THEN UPDATE SET {', '.join(f'{c} = s.{c}' for c in updated)} WHEN NOT MATCHED THEN INSERT *"
        )
    finally:
        spark.catalog.dropTempView(view)


def _open(spark: SparkSession, path: str, days: list[date] | None) -> list:
    """A control table's open rows (not resolved), oldest day first (only those of `days` when given)."""
    if not is_delta_table(path):
        return []
    df = spark.read.format("delta").load(path).where("resolved_at IS NULL")
    if days is not None:
        df = df.where(day_filter("day", days))
    return df.orderBy("day").collect()


def _resolve(spark: SparkSession, path: str, days: list[date], run_id: str, now: datetime, where: str = "") -> None:
    if not days or not is_delta_table(path):
        return
    # Literals, not parameters: Delta's UPDATE does not take parameters in SET. The session's time zone is UTC.
    at = now.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    spark.sql(
        f"UPDATE {delta_path(path)} SET resolved_at = TIMESTAMP '{at}', resolved_by_run = '{_quoted(run_id)}' "
        f"WHERE resolved_at IS NULL AND ({day_predicate('day', days)}){where}"
    )


class LateException(NamedTuple):
    """A table's day with late rows older than the restatement window: recorded, not restated."""

    table: str
    day: date
    rows: int
    batches: str
    window_start: date | None


def record_exceptions(
    spark: SparkSession, pipeline: str, found: list[LateException], run_id: str, now: datetime
) -> None:
    """Upsert each exception: an open exception of a table's day is updated, not duplicated, and left as it is when it
    already says the same (a replayed batch commits nothing)."""
    if found:
        recorded = set(open_exceptions(spark, pipeline, sorted({e.day for e in found})))
        found = [e for e in found if e not in recorded]
    if found:
        new = spark.createDataFrame(
            [(e.table, e.day, e.rows, e.batches, e.window_start, now, run_id, None, None) for e in found],
            EXCEPTIONS_SCHEMA,
        )
        _upsert_open(
            spark, control_path(pipeline, EXCEPTIONS_TABLE), new, ["table", "day"], ["rows", "batches", "window_start"]
        )


def open_exceptions(
    spark: SparkSession, pipeline: str, days: list[date] | None = None, table: str | None = None
) -> list[LateException]:
    """Unresolved exceptions, oldest day first (only those of `days`, and of `table`, when given)."""
    found = [
        LateException(r.table, r.day, r.rows, r.batches, r.window_start)
        for r in _open(spark, control_path(pipeline, EXCEPTIONS_TABLE), days)
    ]
    return [e for e in found if table is None or e.table == table]


def resolve_exceptions(
    spark: SparkSession, pipeline: str, table: str, days: list[date], run_id: str, now: datetime
) -> None:
    """The table's days were rewritten from the whole landing: their late rows are now published."""
    _resolve(spark, control_path(pipeline, EXCEPTIONS_TABLE), days, run_id, now, f" AND `table` = '{_quoted(table)}'")


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


def hold_days(
    spark: SparkSession, pipeline: str, days: list[date], why: str, batches: str, run_id: str, now: datetime
) -> None:
    """Hold `days` (rolled back): no restatement rewrites them until they are released."""
    new = spark.createDataFrame([(d, why, batches, now, run_id, None, None) for d in days], HOLDS_SCHEMA)
    _upsert_open(spark, control_path(pipeline, HOLDS_TABLE), new, ["day"], ["why", "batches", "held_at", "held_by_run"])


def open_holds(spark: SparkSession, pipeline: str, days: list[date] | None = None) -> list[HeldDay]:
    """Days held, oldest first (only those of `days` when given)."""
    return [
        HeldDay(r.day, r.why, r.batches, r.held_at, r.held_by_run)
        for r in _open(spark, control_path(pipeline, HOLDS_TABLE), days)
    ]


def release_holds(spark: SparkSession, pipeline: str, days: list[date], run_id: str, now: datetime) -> None:
    _resolve(spark, control_path(pipeline, HOLDS_TABLE), days, run_id, now)


# One row per plan for a code change (exact_backfills/plans.py): its document, open until promoted or dropped.
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


def record_plan(spark: SparkSession, pipeline: str, plan_id: str, document: str, now: datetime) -> None:
    row = (plan_id, now, document, "open", None, None)
    path = control_path(pipeline, PLANS_TABLE)
    spark.createDataFrame([row], PLANS_SCHEMA).write.format("delta").mode("append").save(path)


def read_plan(spark: SparkSession, pipeline: str, plan_id: str) -> tuple[str, str] | None:
    """(document, status) of a plan, None when there is no such plan."""
    path = control_path(pipeline, PLANS_TABLE)
    if not is_delta_table(path):
        return None
    rows = spark.read.format("delta").load(path).where(F.col("plan_id") == plan_id).collect()
    return (rows[0].document, rows[0].status) if rows else None


def resolve_plan(spark: SparkSession, pipeline: str, plan_id: str, status: str, run_id: str, now: datetime) -> None:
    at = now.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    spark.sql(
        f"UPDATE {delta_path(control_path(pipeline, PLANS_TABLE))} SET status = '{status}', "
        f"resolved_at = TIMESTAMP '{at}', resolved_by_run = '{_quoted(run_id)}' "
        f"WHERE plan_id = '{_quoted(plan_id)}' AND status = 'open'"
    )


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")
