"""The minimal metrics: per asset, its runs' p95 duration, the latest run's duplicates and mismatches, and how far
each table is behind its landing."""

from dataclasses import asdict, dataclass
from datetime import date, datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from exact_backfills import deadlines, landing, late_data
from exact_backfills.declare import Pipeline, Source, SourceKind
from exact_backfills.publish import Operation
from resources import audit
from resources.delta_io import read_table, scalar, table_exists


def _iso(value: date | None) -> str | None:
    return value.isoformat() if value else None


@dataclass(frozen=True)
class TableLag:
    """How far one table is behind its landing: the days a restatement would rewrite (None when nothing is
    published), and its newest published day."""

    stale_days: int | None = None
    newest_published_day: date | None = None


@dataclass(frozen=True)
class LandingLag:
    """How far the tables are behind their landing (see `landing_lag`)."""

    newest_landed_batch: str | None
    newest_landed_day: date | None
    watermark: datetime | None
    landing_lag_s: float | None  # landed data not yet published: the newest batch's load time minus the watermark
    held_days: list[date]  # rolled back: not restated until released
    tables: dict[str, TableLag]


def landing_lag(spark: SparkSession, pipeline: Pipeline) -> LandingLag:
    """How far the tables are behind their landing, from the landing and the tables alone (not the wall clock): the
    days each table must restate for the batches landed since the watermark, the newest landed and published days,
    and the seconds of landed data not yet published (newest batch load time minus the watermark)."""
    try:
        detection: late_data.Detection | None = late_data.detect(spark, pipeline)
    except late_data.NothingPublished:
        detection = None
    stale = detection.days_by_table() if detection else {}
    behind = any(stale.values())
    watermark = detection.watermark.watermark_ts if detection else None
    lag = None
    if detection and watermark and detection.new_watermark_ts:
        lag = round((detection.new_watermark_ts - watermark).total_seconds(), 1) if behind else 0.0
    landed = max((d for s in pipeline.sources if (d := _newest_landed_day(spark, pipeline, s))), default=None)
    tables = {}
    for table in pipeline.tables:
        newest = (
            scalar(read_table(spark, table.name).agg(F.max(table.day_column))) if table_exists(table.name) else None
        )
        tables[table.name] = TableLag(len(stale.get(table.name, [])) if detection else None, newest)
    batches = [landing.batch_name(p) for s in pipeline.sources for p in landing.batch_dirs(s)]
    held = [h.day for h in detection.holds] if detection else []
    return LandingLag(max(batches, default=None), landed, watermark, lag, held, tables)


def _newest_landed_day(spark: SparkSession, pipeline: Pipeline, source: Source) -> date | None:
    """The newest day an events source's landed rows are on, within the partitions (a day outside them is
    quarantined)."""
    if source.kind is not SourceKind.EVENTS or not landing.batch_dirs(source):
        return None
    day = F.col(source.day)
    partitions = pipeline.partitions
    in_partitions = day.between(partitions.first_day, partitions.last_day)
    return scalar(landing.read_landing(spark, source).where(in_partitions).agg(F.max(day)))


@dataclass(frozen=True)
class AssetMetrics:
    """One asset's figures: its runs, their p95 duration, the latest run's duplicate keys per 1,000 rows and
    reconciliation mismatch count, and how far it is behind its landing (see `TableLag`)."""

    asset: str
    runs: int
    p95_run_s: float
    duplicate_per_1k: float | None
    mismatch_count: int | None
    stale_days: int | None
    newest_published_day: date | None
    missed_deadlines: list[date] | None = None  # of the last 30 closed days (None: no deadline declared)

    def to_json(self) -> dict[str, Any]:
        missed = None if self.missed_deadlines is None else [d.isoformat() for d in self.missed_deadlines]
        return {**asdict(self), "newest_published_day": _iso(self.newest_published_day), "missed_deadlines": missed}


@dataclass(frozen=True)
class Metrics:
    """What `metrics` reports: how far the tables are behind their landing, and each asset's figures."""

    landing: LandingLag
    assets: list[AssetMetrics]

    def to_json(self) -> dict[str, Any]:
        """The figures as `metrics --json` prints them."""
        lag = self.landing
        return {
            "newest_landed_batch": lag.newest_landed_batch,
            "newest_landed_day": _iso(lag.newest_landed_day),
            "watermark": _iso(lag.watermark),
            "landing_lag_s": lag.landing_lag_s,
            "held_days": [d.isoformat() for d in lag.held_days],
            "assets": [a.to_json() for a in self.assets],
        }


def metrics(spark: SparkSession, pipeline: Pipeline) -> Metrics:
    """Per asset: p95 run duration (a run's span of work on the asset), the latest run's duplicate keys per 1,000
    rows and reconciliation mismatch count, and how far it is behind its landing (see `landing_lag`)."""
    lag = landing_lag(spark, pipeline)
    rows = audit.read(spark, pipeline.name).where(F.col("operation") != Operation.ROLLBACK.value)
    per_run = rows.groupBy("asset", "run_id").agg(
        (F.max("ended_at").cast("double") - F.min("started_at").cast("double")).alias("duration_s"),
        F.max("ended_at").alias("ended_at"),
        F.max("duplicate_per_1k").alias("duplicate_per_1k"),
        F.sum("mismatch_count").alias("mismatch_count"),
    )
    per_asset = (
        per_run.groupBy("asset")
        .agg(
            F.percentile_approx("duration_s", 0.95).alias("p95_s"),
            F.count(F.lit(1)).alias("runs"),
            F.max_by(F.struct("duplicate_per_1k", "mismatch_count"), "ended_at").alias("latest"),
        )
        .orderBy("asset")
    )
    assets = []
    for r in per_asset.collect():
        behind = lag.tables.get(r.asset, TableLag())
        latest = r.latest
        assets.append(
            AssetMetrics(
                r.asset,
                r.runs,
                round(r.p95_s, 1),
                latest.duplicate_per_1k,
                latest.mismatch_count,
                behind.stale_days,
                behind.newest_published_day,
                deadlines.missed(spark, pipeline, r.asset) if r.asset in pipeline.by_name else None,
            )
        )
    return Metrics(lag, assets)
