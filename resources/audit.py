"""The audit trail: a pipeline's Delta table `backfill_audit` (lake.control_path), one row per (run, asset, partition)
written."""

from dataclasses import asdict, dataclass
from datetime import date, datetime
from typing import NamedTuple

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from resources.delta_io import day_filter, delta_path, is_delta_table, table_properties
from resources.lake import control_path

AUDIT_TABLE = "backfill_audit"

SCHEMA = T.StructType(
    [
        T.StructField("run_id", T.StringType()),
        T.StructField("backfill_id", T.StringType()),
        T.StructField("operation", T.StringType()),  # publish.Operation: backfill, restatement, rollback, release
        T.StructField("asset", T.StringType()),
        T.StructField("partition", T.DateType()),
        T.StructField("rows_written", T.LongType()),
        T.StructField("fingerprint", T.StringType()),
        T.StructField("delta_version", T.LongType()),
        T.StructField("started_at", T.TimestampType()),
        T.StructField("ended_at", T.TimestampType()),
        T.StructField("source_watermark", T.TimestampType()),
        T.StructField("duplicate_per_1k", T.DoubleType()),
        T.StructField("mismatch_count", T.IntegerType()),
        T.StructField("code_version", T.StringType()),  # of the table's code that built the day
    ]
)


class DayContent(NamedTuple):
    """A day of a table: its rows and their fingerprint (None: no rows)."""

    rows: int
    fingerprint: str | None


@dataclass
class AuditRow:
    run_id: str
    backfill_id: str | None
    operation: str
    asset: str
    partition: date
    rows_written: int
    fingerprint: str | None
    delta_version: int | None
    started_at: datetime
    ended_at: datetime
    source_watermark: datetime | None = None
    duplicate_per_1k: float | None = None
    mismatch_count: int | None = None
    code_version: str | None = None


# The trail gains a file per asset at every run, for as long as the pipeline lives, and every run reads it for its own
# days. Its files record the days they hold (statistics on `partition`; the project's tables record none), so such a
# read skips the files of other days. Set when the trail is made; an older trail gets it from the vacuum
# (`keep_compact`), which also merges the trail's small files nightly. Not Delta's auto compaction: in a long-lived
# engine it rewrote an asset's whole trail after every append (its count of small files is the engine's own, and a
# compaction's removals bring it to zero, so every append finds the asset never compacted), a second commit per run.
TRAIL_PROPERTIES = {"delta.dataSkippingStatsColumns": "partition"}
# What a trail made with auto compaction has, which the vacuum takes off.
AUTO_COMPACT = "delta.autoOptimize.autoCompact"


def append(spark: SparkSession, pipeline: str, rows: list[AuditRow]) -> None:
    """Blind appends: concurrent runs never conflict on the audit table."""
    if rows:
        df = spark.createDataFrame([tuple(asdict(r).values()) for r in rows], SCHEMA)
        # A trail written before a column was added takes it (its earlier rows read null there).
        writer = df.write.format("delta").mode("append").option("mergeSchema", "true").partitionBy("asset")
        writer.options(**TRAIL_PROPERTIES).save(control_path(pipeline, AUDIT_TABLE))


@dataclass(frozen=True)
class Compacted:
    """What the vacuum did to a pipeline's trail: whether it set TRAIL_PROPERTIES, whether it turned Delta's auto
    compaction off, and the files it merged."""

    properties_set: bool
    auto_compaction_off: bool
    files_merged: int

    def describe(self) -> str:
        properties = "its files' day statistics set; " if self.properties_set else ""
        off = "compaction after every append turned off; " if self.auto_compaction_off else ""
        return f"{properties}{off}{self.files_merged} small file(s) merged"


def keep_compact(spark: SparkSession, pipeline: str) -> Compacted | None:
    """The trail with TRAIL_PROPERTIES (a trail made before them lacks them) and without auto compaction (a trail made
    with it has it), its small files merged (OPTIMIZE, which also records the days of the files it writes). None when
    there is no trail."""
    path = control_path(pipeline, AUDIT_TABLE)
    if not is_delta_table(path):
        return None
    table = delta_path(path)
    properties = table_properties(spark, path)
    missing = {k: v for k, v in TRAIL_PROPERTIES.items() if properties.get(k) != v}
    if missing:
        assigned = ", ".join(f"'{k}' = '{v}'" for k, v in missing.items())
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({assigned})")
    auto_compacted = AUTO_COMPACT in properties
    if auto_compacted:
        spark.sql(f"ALTER TABLE {table} UNSET TBLPROPERTIES ('{AUTO_COMPACT}')")
    merged = spark.sql(f"OPTIMIZE {table}").collect()[0]["metrics"]["numFilesRemoved"]
    return Compacted(bool(missing), auto_compacted, int(merged or 0))


def read(spark: SparkSession, pipeline: str) -> DataFrame:
    path = control_path(pipeline, AUDIT_TABLE)
    if not is_delta_table(path):
        return spark.createDataFrame([], SCHEMA)
    trail = spark.read.format("delta").load(path)
    missing = [f for f in SCHEMA.fields if f.name not in trail.columns]
    return trail.select(*trail.columns, *[F.lit(None).cast(f.dataType).alias(f.name) for f in missing])


@dataclass
class _Found:
    """What a run found of the trail: the latest row per (asset, day) for the days it asked about."""

    days: set[date]
    latest: dict[tuple[str, date], DayContent]


# (pipeline, run id) -> what that run found (a process runs one run at a time: only the current one's is kept).
_found_by_run: dict[tuple[str, str], _Found] = {}


def latest_written(spark: SparkSession, pipeline: str, trail: DataFrame | None = None) -> DataFrame:
    """The trail's latest row per (asset, day): what last wrote each published day (of `trail`, a part of it)."""
    latest = Window.partitionBy("asset", "partition").orderBy(F.col("ended_at").desc(), F.col("run_id").desc())
    rows = read(spark, pipeline) if trail is None else trail
    return rows.withColumn("_n", F.row_number().over(latest)).where("_n = 1").drop("_n")


BuiltBy = dict[str, dict[date, str | None]]  # asset -> each published day -> the code version that last wrote it


def built_by(spark: SparkSession, pipeline: str) -> BuiltBy:
    """Asset -> each published day -> the code version that last wrote it (None: not recorded)."""
    found: BuiltBy = {}
    for r in latest_written(spark, pipeline).select("asset", "partition", "code_version").collect():
        found.setdefault(r.asset, {})[r.partition] = r.code_version
    return found


def latest_before_run(
    spark: SparkSession, pipeline: str, run_id: str, days: list[date]
) -> dict[tuple[str, date], DayContent]:
    """Each (asset, day)'s rows and fingerprint as last written before run `run_id`, for `days` (and any asked before
    in the run), to compare a new write with. Read once per run and days: every read of the audit table after an
    append costs a new Delta snapshot, and a run writes several tables (each one's previous state is the same whether
    read before or after the others' writes); the run's own rows are left out, so a later ask still finds what was
    there before it. At most one row per asset per day, so small even for a full history."""
    if (pipeline, run_id) not in _found_by_run:
        _found_by_run.clear()
        _found_by_run[(pipeline, run_id)] = _Found(set(), {})
    found = _found_by_run[(pipeline, run_id)]
    missing = sorted(set(days) - found.days)
    if missing:
        before = read(spark, pipeline).where((F.col("run_id") != run_id) & day_filter("partition", missing))
        rows = (
            latest_written(spark, pipeline, before)
            .select("asset", "partition", "rows_written", "fingerprint")
            .collect()
        )
        found.latest.update({(r.asset, r.partition): DayContent(r.rows_written, r.fingerprint) for r in rows})
        found.days.update(missing)
    return found.latest
