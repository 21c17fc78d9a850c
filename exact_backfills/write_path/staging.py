"""Staging: each table's rows for the change's days, built (or read) from its source, and held so that they are
checked, read downstream and written from the same computed rows. A table reads its upstream tables through an
overlay: this change's rows where it stages them, what is published elsewhere."""

from collections.abc import Callable, Collection, Mapping
from datetime import date

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from exact_backfills import builds
from exact_backfills.builds import RowsOfDays, Staged, narrowed
from exact_backfills.declare import Declared, Pipeline, Staging
from exact_backfills.write_path.changes import Change, FromPlan, Renamed, Restated, Restored
from exact_backfills.write_path.context import Writing
from resources.delta_io import Scan, day_filter, read_days, read_path, scan_of_table, table_exists
from resources.lake import shadow_path, table_path
from resources.settings import Codegen, settings
from resources.spark import evaluation_for, interpreted


def stage(w: Writing, table: str) -> None:
    """The table's rows staged and held; the change's evaluation chosen from what its first table reads."""
    spec = w.pipeline.by_name[table]
    built = _built(w, spec)
    if not w.staged and _interpreted(built.scans):
        w.evaluation.enter_context(interpreted(w.spark))
    w.staged[table] = cached(w.pipeline, built, spec, w.change)


def _interpreted(scans: list[Scan]) -> bool:
    """Whether a change whose first table reads `scans` is evaluated interpreted: SPARK_CODEGEN=auto chooses from what
    that table reads (the landing, or the published days of its upstream), which bounds the rows the change flows."""
    if not scans or settings().codegen is not Codegen.AUTO:  # a plan's rows, an earlier version's: as configured
        return False
    return evaluation_for(sum(scan.bytes for scan in scans)) is Codegen.INTERPRETED


def _built(w: Writing, table: Declared) -> Staged:
    """The table's rows for the change's days, from its source, not computed yet."""
    spark, pipeline, change, staged = w.spark, w.pipeline, w.change, w.staged
    scans: list[Scan] = []
    day_column = pipeline.day_columns

    def published(upstream: str, days: list[date]) -> DataFrame:
        df = read_days(spark, upstream, day_column[upstream], days)
        scans.append(scan_of_table(df, upstream))
        return df

    def ours(upstream: str, days: list[date]) -> DataFrame:
        """This change's staged rows of `upstream` on `days` (no day: none of them)."""
        built = staged[upstream].table
        if not days:
            return built.limit(0)
        return built if set(days) == set(change.days[upstream]) else built.where(day_filter(day_column[upstream], days))

    read = overlay({t: change.days[t] for t in staged}, ours, published, table_exists)
    days = change.days[table.name]
    source = change.source(table.name)
    if isinstance(source, Restored):
        result = _restored(spark, pipeline, table, source, days, read)
    elif isinstance(source, FromPlan):
        result = _from_plan(pipeline, table, source, days, read, spark)
    elif isinstance(source, Renamed):
        result = _renamed(spark, pipeline, table, source, days, read)
    elif isinstance(source, Restated) and isinstance(table, Staging) and table.events:
        result = builds.restate_events(spark, pipeline, table, source.landed, days)
    else:
        result = builds.build(spark, pipeline, table, days, read)
    result.scans = [*result.scans, *scans]
    return result


def cached(pipeline: Pipeline, built: Staged, table: Declared, change: Change) -> Staged:
    """`built`, its rows cached (or checkpointed) so that they are checked, read downstream and written from the same
    computed rows.

    Cached rows are kept partitioned by day, as `overwrite_days` lays them out to write them: Spark then finds them
    so and exchanges none of them again, neither for the write nor for what groups them by day (the checks' distinct
    keys, a downstream table grouping by the day and more). Within a partition they are sorted by day and key, once:
    the write, which orders its rows by day, then sorts nothing; the distinct keys' sort finds its rows in order; what
    groups them by day aggregates one day after another. A checkpoint keeps neither."""
    if built.selects_cached:
        return built
    if checkpointed(pipeline, table, change, built.scans):
        built.table = built.table.localCheckpoint()
    else:
        by_day = built.table.repartition(table.day_column)
        built.table = by_day.sortWithinPartitions(table.day_column, *table.key).persist()
    return built


def checkpointed(pipeline: Pipeline, table: Declared, change: Change, scans: list[Scan]) -> bool:
    """Whether a table's staged rows are held as a local checkpoint (computed at once, stored as rows, the plan cut)
    rather than cached (computed by their first use, stored compressed by column).

    A write to a table makes Spark recompute every cached frame computed from it, so rows computed from a table the
    change writes are checkpointed: its own rows (a restatement's build reads what the table holds, a restore an
    earlier version of it) or an upstream's published days (`scans`). Of the others, a narrowed build's (a few days)
    are checkpointed too, which costs less than caching few rows; the rows of most of the history are cached, held in
    less memory than as rows."""
    source = change.source(table.name)
    if isinstance(source, Restored) or (isinstance(source, Restated) and isinstance(table, Staging) and table.events):
        return True
    if not {scan.source for scan in scans}.isdisjoint(pipeline.with_side_tables(change.tables())):
        return True
    return narrowed(change.days[table.name], pipeline.partitions)


def rows_as_of(spark: SparkSession, table: str, day_column: str, version: int, days: list[date]) -> DataFrame:
    """The table's rows of `days` as of `version` (none before the table existed)."""
    if version < 0:
        return read_days(spark, table, day_column, days).where(F.lit(False))
    old = spark.read.format("delta").option("versionAsOf", version).load(table_path(table))
    return old.where(day_filter(day_column, days))


def _from_plan(
    pipeline: Pipeline, table: Declared, source: FromPlan, days: list[date], read: RowsOfDays, spark: SparkSession
) -> Staged:
    """A table's days as a plan built them (its side tables' too), with its upstream to reconcile with as this change
    leaves it. Nothing lost was checked when the plan built them."""
    rec = table.reconcile
    shadow = {name: shadow_path(source.plan_id, name) for name in [table.name, *(s.name for s in table.side_tables)]}
    return Staged(
        table=read_path(spark, shadow[table.name], table.day_column, days),
        upstream=read(rec.upstream, days) if rec else None,
        upstream_day=pipeline.day_columns[rec.upstream] if rec else None,
        side_tables={s.name: read_path(spark, shadow[s.name], s.day_column, days).persist() for s in table.side_tables},
    )


def _renamed(
    spark: SparkSession, pipeline: Pipeline, table: Declared, source: Renamed, days: list[date], read: RowsOfDays
) -> Staged:
    """A renamed table's days as the table it was published as holds them, with its upstream to reconcile with."""
    assert not table.side_tables, f"{table.name}: a table with side tables is not renamed"
    rec = table.reconcile
    return Staged(
        table=read_days(spark, source.former, table.day_column, days),
        upstream=read(rec.upstream, days) if rec else None,
        upstream_day=pipeline.day_columns[rec.upstream] if rec else None,
    )


def _restored(
    spark: SparkSession, pipeline: Pipeline, table: Declared, source: Restored, days: list[date], read: RowsOfDays
) -> Staged:
    """A table's days as of an earlier version, with its upstream to reconcile with as this change leaves it; its
    days the change does not restore (reached through a day dependency from a restored upstream day) rebuilt from
    that upstream. Nothing lost is not checked: the days are held, what landed for them left out on purpose."""
    rec = table.reconcile
    column = pipeline.day_columns
    restored = [d for d in days if source.restores(d)]
    rows = rows_as_of(spark, table.name, table.day_column, source.version, restored)
    rebuilt = [d for d in days if not source.restores(d)]
    if rebuilt:
        assert not table.side_tables, f"{table.name}: a table with side tables is restored on every day it writes"
        rows = rows.unionByName(builds.build(spark, pipeline, table, rebuilt, read).table)
    return Staged(
        table=rows,
        upstream=read(rec.upstream, days) if rec else None,
        upstream_day=column[rec.upstream] if rec else None,
        side_tables={
            side: rows_as_of(spark, side, column[side], v, days).persist() for side, v in source.side_versions.items()
        },
    )


def overlay(
    own_days: Mapping[str, Collection[date]],
    own: RowsOfDays,
    published: RowsOfDays,
    published_exists: Callable[[str], bool] = lambda _: True,
    across_code_versions: bool = False,
) -> RowsOfDays:
    """What a table reads of an upstream table: the rows this write has of it (a change's staged rows, a plan's
    shadow) on the days it has them (`own_days`), what is published on the others. Rows of two code versions
    (`across_code_versions`: a plan's) may differ by a column, null where a version has none; else they must not."""

    def read(upstream: str, days: list[date]) -> DataFrame:
        if upstream not in own_days:
            return published(upstream, days)
        ours = set(own_days[upstream])
        mine, rest = sorted(set(days) & ours), sorted(set(days) - ours)
        parts = [own(upstream, mine)] if mine else []
        if rest and published_exists(upstream):
            parts.append(published(upstream, rest))
        if not parts:
            return own(upstream, [])
        if len(parts) == 1:
            return parts[0]
        return parts[0].unionByName(parts[1], allowMissingColumns=across_code_versions)

    return read
