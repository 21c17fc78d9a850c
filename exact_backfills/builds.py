"""How each table's days are built: the staging tables the machinery builds from their source, and the user's builds
wrapped to read their upstream tables through their day dependencies. A build turns the days to write into rows,
`Staged`, nothing written yet; publish.py checks and writes them.

Every transform here is deterministic (no clock, no randomness), so re-running a range over the same landing gives
the same rows."""

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from exact_backfills import landing, landing_index, quarantine
from exact_backfills.calendar import Partitions
from exact_backfills.declare import (
    BATCH_COLUMN,
    FILE_COLUMN,
    QUARANTINE_DAY,
    VALID_FROM,
    Declared,
    Pipeline,
    Source,
    Staging,
    Table,
)
from resources.delta_io import Scan, day_filter, read_days

# A table's rows of `days`, as the change that builds them gives them (the published rows, or its own). A build reads
# its upstream through the declaration's `Read` (declare.py), these rows of the days its day dependency names.
RowsOfDays = Callable[[str, list[date]], DataFrame]


@dataclass
class Staged:
    """What a table's build produces for its days, before anything is written."""

    table: DataFrame
    upstream: DataFrame | None = None  # the upstream rows it must reconcile with
    upstream_day: str | None = None  # their day column
    lost: DataFrame | None = None  # keys that should be in the table (or quarantine) but are not
    side_tables: dict[str, DataFrame] = field(default_factory=dict)  # written with it, e.g. quarantine
    cached: list[DataFrame] = field(default_factory=list)  # inputs read once for the build, checks and writes
    scans: list[Scan] = field(default_factory=list)  # what its reads of the landing and of published tables scan
    # Its rows are a selection of rows kept in `cached`, computed once for the build: they are not cached again.
    selects_cached: bool = False

    def unpersist(self) -> None:
        for df in [self.table, *self.side_tables.values(), *self.cached]:
            df.unpersist()


@dataclass
class LandedBatches:
    """What a restatement's detection read of an events source's newly landed batches, kept for its staging table's
    restatement build, which then reads no history: every row of the batches, and the staging table's rows of every
    valid key in them, on whatever day they are staged."""

    batches: list[str]
    rows: DataFrame
    staged: DataFrame

    def unpersist(self) -> None:
        self.rows.unpersist()  # `staged`, a checkpoint, is freed with its DataFrame


# Up to this many days, a staging build reads only the landed batches that can hold rows of its days (see
# landing_index), and only the keys that have a version on them (broadcast); above it, or over every partition day,
# the whole landing once.
NARROWED_UP_TO_DAYS = 366


def narrowed(days: list[date], partitions: Partitions) -> bool:
    return len(days) <= NARROWED_UP_TO_DAYS and len(days) < len(partitions.days)


# Versions: which of a key's versions is the newest.


def newest_first(source: Source) -> list[Column]:
    """A key's versions, newest first: the latest `newest`, then the latest load time, then the latest file, then a
    hash of the row, so that even two different rows with equal timestamps resolve the same way on every run."""
    return [
        F.col(source.newest).desc(),
        F.col(source.loaded_at).desc(),
        F.col(FILE_COLUMN).desc(),
        F.xxhash64(*source.columns).desc(),
    ]


def latest_versions(versions: DataFrame, source: Source, key: list[str], then: tuple = ()) -> DataFrame:
    """One row per `key`, its newest version (`newest_first`; `then`: more tie-breaks for identical rows)."""
    order = Window.partitionBy(*key).orderBy(*newest_first(source), *then)
    return versions.withColumn("_rank", F.row_number().over(order)).where("_rank = 1").drop("_rank")


# The marks of every landed version read for most of the history (`by_key`).
LATEST = "_latest"  # its key's newest version, whether it meets the contract or not
LATEST_VALID = "_latest_valid"  # its key's newest version among those that meet the contract


def by_key(source: Source, landed: DataFrame, partitions: Partitions) -> DataFrame:
    """Every landed row, tagged with its reason (quarantine.tagged) and marked in one pass over its key's versions,
    newest first: whether it is the key's latest version (what the nothing-lost check expects on its day), the key's
    latest valid one (what staging holds) and how many versions the key has (what the landing index links). The rows
    come out partitioned by key: held so, staging, the nothing-lost check and the index read them without shuffling
    the versions again."""
    key = list(source.key)
    order = Window.partitionBy(*key).orderBy(*newest_first(source))
    valid = F.col(quarantine.REASON).isNull()
    valid_so_far = F.sum(valid.cast("int")).over(order.rowsBetween(Window.unboundedPreceding, Window.currentRow))
    versions = F.count(F.lit(1)).over(order.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing))
    return quarantine.tagged(source, landed, partitions).select(
        "*",
        (F.row_number().over(order) == 1).alias(LATEST),
        (valid & (valid_so_far == 1)).alias(LATEST_VALID),
        versions.alias(landing_index.KEY_VERSIONS),
    )


def current_versions(source: Source, versions: DataFrame, days: list[date]) -> DataFrame:
    """The current version of every key whose current day is one of `days`.

    The latest version of a key is decided over all its versions in `versions`, not only those dated on `days`: a
    correction that moves a key to another day removes it from its old day. `versions` may be narrowed to the keys
    that can be on the days (`mark_keys_dated_on`), never to the versions dated on them."""
    latest = latest_versions(versions, source, list(source.key))
    return latest.where(day_filter(source.day, days)).select(*source.version_columns)


# Marks the versions of the keys that have a version dated on given days.
KEY_ON_DAYS = "_key_on_days"


def mark_keys_dated_on(source: Source, versions: DataFrame, days: list[date]) -> DataFrame:
    """`versions` with KEY_ON_DAYS true on every version of the keys that have a version dated on one of `days`: the
    only keys whose latest version can be on those days, with all their versions (the latest may be dated on another
    day). The keys are broadcast, so the versions are marked where they are read instead of shuffled: for a limited
    number of days."""
    key = list(source.key)
    keys = versions.where(day_filter(source.day, days)).select(*key).distinct().withColumn(KEY_ON_DAYS, F.lit(True))
    marked = versions.join(F.broadcast(keys), key, "left")
    return marked.select(*versions.columns, F.coalesce(KEY_ON_DAYS, F.lit(False)).alias(KEY_ON_DAYS))


def dimension_versions(source: Source, versions: DataFrame, first: date, days: list[date]) -> DataFrame:
    """A dimension's versions that take effect on each of `days` (`valid_from`), the last one of a day winning.

    Versions dated before the first partition take effect on the first partition's day. A version is valid until the
    key's next version takes effect: a validity interval, so a re-run of an old day sees the dimension as it was that
    day while the table only grows with changes, not with keys x days."""
    dated = versions.withColumn(VALID_FROM, F.greatest(F.to_date(source.day), F.lit(first)))
    per_day = latest_versions(dated.where(day_filter(VALID_FROM, days)), source, [*source.key, VALID_FROM])
    return per_day.select(*source.key, VALID_FROM, *dimension_columns(source))


def dimension_columns(source: Source) -> list[str]:
    """The columns a dimension's staging keeps beside its key and `valid_from`: all but the load time, which a
    re-delivery of the same version changes, unless it is what decides which version is newest (late-data detection
    compares the versions staged with those landed by it)."""
    return [c for c in source.columns if c not in source.key and (c != source.loaded_at or c == source.newest)]


# The staging builds.


def _landed(spark: SparkSession, pipeline: Pipeline, source: Source, days: list[date]) -> landing.LandingRead:
    """The landed rows a build of `days` reads: the batches that can hold them, or, for most of the history, all."""
    narrow = narrowed(days, pipeline.partitions)
    batches = landing_index.batches_holding(spark, pipeline, source, days) if narrow else None
    return landing.landing_read(spark, source, batches)


def build_events(spark: SparkSession, pipeline: Pipeline, table: Staging, days: list[date]) -> Staged:
    """An events source's staging days: each key's current version on them, and its quarantine's days."""
    partitions = pipeline.partitions
    if not narrowed(days, partitions):
        return _build_events_whole(spark, pipeline, table, days)
    source = table.source
    landed_read = _landed(spark, pipeline, source, days)
    # Up to a year: only the keys with a version on the days can be on them. Their versions are kept for the build
    # and checks, with every row breaking the contract, which quarantine files by a day of its own: one scan for both.
    marked = mark_keys_dated_on(source, landed_read.rows, days)
    breaks = quarantine.breaks_contract(source, partitions)
    scanned = marked.where(F.col(KEY_ON_DAYS) | breaks).persist()
    keys_on_days = scanned.where(KEY_ON_DAYS).drop(KEY_ON_DAYS)
    landed = scanned.drop(KEY_ON_DAYS)
    versions, _ = quarantine.split(source, keys_on_days, partitions)
    _, rejected = quarantine.split(source, landed, partitions)  # by quarantine day, whatever the key
    staged = current_versions(source, versions, days)
    quarantined = quarantine.for_days(source, rejected, days).persist()
    return Staged(
        table=staged,
        side_tables={table.quarantine: quarantined},
        lost=quarantine.lost_keys(source, keys_on_days, staged, quarantined, days),
        cached=[scanned],
        scans=[landed_read.scan],
    )


def _build_events_whole(spark: SparkSession, pipeline: Pipeline, table: Staging, days: list[date]) -> Staged:
    """`build_events` over most of the history: the whole landing read once and marked by key (`by_key`), which
    indexes its batches too."""
    source = table.source
    key = list(source.key)
    landed_read = landing.landing_read(spark, source, None)
    marked = by_key(source, landed_read.rows, pipeline.partitions).persist()
    landing_index.index_read(spark, pipeline, source, replace(landed_read, rows=marked))
    valid, rejected = quarantine.split_tagged(marked)
    on_days = day_filter(source.day, days)
    staged = valid.where(F.col(LATEST_VALID) & on_days).select(*source.version_columns)
    quarantined = quarantine.for_days(source, rejected, days).persist()
    expected = marked.where(F.col(LATEST) & quarantine.key_not_null(key) & on_days)
    return Staged(
        table=staged,
        side_tables={table.quarantine: quarantined},
        lost=quarantine.missing(key, expected.select(F.col(source.day).alias("day"), *key), staged, quarantined),
        cached=[marked],
        scans=[landed_read.scan],
        selects_cached=True,
    )


def restate_events(
    spark: SparkSession, pipeline: Pipeline, table: Staging, landed: LandedBatches, days: list[date]
) -> Staged:
    """An events source's staging days for a restatement, from what is published plus the batches just read, not from
    the history: a key's latest version is its staged one unless one of the batches beats it, so it is decided, by
    the same transform, over the days' staged rows, the staged rows of the keys in the batches (wherever they are)
    and the batches' rows. Quarantine keeps its rows of other batches and takes these batches' afresh (a batch re-read
    is not quarantined twice). Nothing lost is checked against the same inputs; the landing as a whole is checked by
    backfills and `check`.

    Exact because staging holds every batch read so far: each restatement stages the days of the batches it reads
    (the first after a backfill reads them all), and a backfill reads the whole landing. A day rolled back holds an
    older version until it is backfilled: a restatement builds on what is staged."""
    source = table.source
    columns = source.version_columns
    on_days = source.as_versions(read_days(spark, table.name, table.day_column, days))
    valid, rejected = quarantine.split(source, landed.rows, pipeline.partitions)
    versions = on_days.unionByName(landed.staged).unionByName(valid.select(*columns))
    staged = current_versions(source, versions, days)
    read_batches = [date.fromisoformat(b) for b in landed.batches]
    from_other_batches = read_days(spark, table.quarantine, QUARANTINE_DAY, days).where(
        ~F.col(BATCH_COLUMN).isin(read_batches)
    )
    quarantined = quarantine.for_days(source, from_other_batches, days).unionByName(
        quarantine.for_days(source, rejected, days)
    )
    every_version = versions.unionByName(rejected.select(*columns))
    quarantined = quarantined.persist()
    return Staged(
        table=staged,
        side_tables={table.quarantine: quarantined},
        lost=quarantine.lost_keys(source, every_version, staged, quarantined, days),
    )


def build_dimension(spark: SparkSession, pipeline: Pipeline, table: Staging, days: list[date]) -> Staged:
    """A dimension's versions taking effect on `days`."""
    landed_read = _landed(spark, pipeline, table.source, days)
    return Staged(
        table=dimension_versions(table.source, landed_read.rows, pipeline.partitions.first_day, days),
        scans=[landed_read.scan],
    )


def build_declared(spark: SparkSession, pipeline: Pipeline, table: Table, days: list[date], read: RowsOfDays) -> Staged:
    """A user's table: its build, reading each upstream through its day dependency, and the upstream's rows of the
    same days to reconcile with."""
    reads: dict[str, DataFrame] = {}
    first_day, last_day = pipeline.partitions.first_day, pipeline.partitions.last_day

    def read_upstream(upstream: str) -> DataFrame:
        if upstream not in table.upstream:
            raise KeyError(f"{table.name} reads {upstream}, which its declaration does not name as an upstream table")
        if upstream not in reads:
            reads[upstream] = read(upstream, table.upstream[upstream].upstream_days(days, first_day, last_day))
        return reads[upstream]

    rows = table.build(spark, days, read_upstream)
    rec = table.reconcile
    upstream = None
    if rec:
        upstream = read_upstream(rec.upstream)
        if rec.window_days == 1 and table.upstream[rec.upstream].upstream_days(days, first_day, last_day) != sorted(
            set(days)
        ):
            upstream = upstream.where(day_filter(pipeline.day_columns[rec.upstream], days))
    return Staged(table=rows, upstream=upstream, upstream_day=pipeline.day_columns[rec.upstream] if rec else None)


def build(spark: SparkSession, pipeline: Pipeline, table: Declared, days: list[date], read: RowsOfDays) -> Staged:
    """The table's rows of `days`, from the landing (a staging table) or its upstream tables, not computed yet."""
    if isinstance(table, Table):
        return build_declared(spark, pipeline, table, days, read)
    if table.events:
        return build_events(spark, pipeline, table, days)
    return build_dimension(spark, pipeline, table, days)
