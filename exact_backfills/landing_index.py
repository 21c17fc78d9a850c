"""Which landed batches can hold a day's rows: the control table `landing_batch_days`, one row per (source, batch,
day), written when a build first sees a batch. A build of a few days then reads only those batches, not the whole
landing (what each read scans is recorded in its materializations: see delta_io.Scan).

A batch of an events source can hold rows of day D when
- one of its rows is dated D, or would be quarantined on D: a row breaking the contract is filed on its day or on its
  batch's day clamped into the partitions (quarantine.py), so a batch always indexes its own day and that one. Days
  outside the partitions are indexed too: should the pipeline's calendar later widen them, a narrowed build of a
  newly covered day still finds every batch holding its rows;
- it holds a version of a key that has a version dated D in any batch: staging takes a key's latest version wherever
  it is, so building D needs every batch holding the key, the one that moved it away from D included.
A batch of a dimension can hold the days its versions take effect on (and, like any batch, its own day).

Indexing new batches reads the key and day columns of the landing once, to link them to the older batches holding the
same keys; a build that reads the whole landing anyway indexes the batches it read from those same rows
(`index_read`), so that the first narrowed build after it reads no history. Batches are immutable, so a row of the index
stays true; a file taken out of the landing later (`withdraw`) leaves a superset, which reads a batch too many, never
one too few."""

from collections import defaultdict
from datetime import date

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from exact_backfills import landing
from exact_backfills.calendar import Partitions
from exact_backfills.declare import BATCH_COLUMN, Pipeline, Source, SourceKind
from exact_backfills.landing import LandingRead
from resources.delta_io import log_version, newest_log_entry
from resources.lake import control_path
from resources.storage import StoredEntry

INDEX_TABLE = "landing_batch_days"
# On a build's rows, when it has counted them (builds.by_key): how many versions the row's key has. A key of one
# version links no batch to another.
KEY_VERSIONS = "_key_versions"
_SCHEMA = "dataset string, batch date, day date"


def _counted(landed: DataFrame | None) -> list[str]:
    return [KEY_VERSIONS] if landed is not None and KEY_VERSIONS in landed.columns else []


def _event_days(
    spark: SparkSession,
    source: Source,
    new: list[str],
    known: list[str],
    landed: DataFrame | None,
    cached: list[DataFrame],
) -> DataFrame:
    key = list(source.key)
    counted = _counted(landed)
    # The batches listed now only: one landing meanwhile is indexed, whole, by the next update.
    dated = (
        (landed if landed is not None else landing.read_landing(spark, source))
        .select(*key, F.col(BATCH_COLUMN).alias("batch"), F.col(source.day).alias("day"), *counted)
        .where(F.col("batch").isin([date.fromisoformat(b) for b in known]))
    )
    if landed is None:  # read once for both of its uses below
        dated = dated.persist()
        cached.append(dated)
    arrived = dated.where(F.col("batch").isin([date.fromisoformat(b) for b in new]))
    own = arrived.where(F.col("day").isNotNull()).select("batch", "day")
    if set(new) != set(known):  # the keys the new batches hold, in any batch
        not_null = F.lit(True)
        for column in key:
            not_null = not_null & F.col(column).isNotNull()
        keys = arrived.where(not_null).select(*key).distinct()
        dated = dated.join(keys, key, "left_semi")
    # Every version of those keys, in any batch: each of their batches holds each of their days. A key in one batch
    # only adds nothing to that batch's own days.
    if counted:
        dated = dated.where(F.col(KEY_VERSIONS) > 1)
    per_key = (
        dated.groupBy(*key)
        .agg(F.collect_set("batch").alias("batches"), F.collect_set("day").alias("days"))
        .where(F.size("batches") > 1)
    )
    linked = per_key.select(F.explode("batches").alias("batch"), "days").select("batch", F.explode("days").alias("day"))
    return own.unionByName(linked)


def _dimension_days(
    spark: SparkSession, source: Source, new: list[str], landed: DataFrame | None, partitions: Partitions
) -> DataFrame:
    versions = landing.read_landing(spark, source, new) if landed is None else landed
    versions = versions.where(F.col(BATCH_COLUMN).isin([date.fromisoformat(b) for b in new]))
    return versions.select(F.col(BATCH_COLUMN).alias("batch"), landing.event_day(source, partitions).alias("day"))


def indexed(spark: SparkSession, pipeline: Pipeline) -> dict[str, dict[str, set[date]]]:
    """source -> batch -> its days, as indexed (batches not indexed yet are not in it)."""
    index: dict[str, dict[str, set[date]]] = defaultdict(lambda: defaultdict(set))
    for dataset, batch, day in _rows(spark, control_path(pipeline.name, INDEX_TABLE)):
        index[dataset][batch].add(day)
    return index


# The index's rows as the newest commit of its table left them, by the log file of that commit. A run reads the index
# three times (its estimate, then each source's build), each a Spark job on its main thread: a commit's rows never
# change, so they are read once per process.
_read: dict[str, tuple[StoredEntry, list[tuple[str, str, date]]]] = {}


def _rows(spark: SparkSession, path: str) -> list[tuple[str, str, date]]:
    newest = newest_log_entry(path)
    if newest is None:
        return []
    known = _read.get(path)
    if known is None or known[0] != newest:
        table = spark.read.format("delta").option("versionAsOf", log_version(newest)).load(path)
        known = _read[path] = (newest, [(r.dataset, r.batch.isoformat(), r.day) for r in table.collect()])
    return known[1]


def update(
    spark: SparkSession, pipeline: Pipeline, read: dict[str, LandingRead] | None = None
) -> dict[str, dict[str, set[date]]]:
    """Index the batches not indexed yet (one commit, none when every batch is), and return the whole index. `read`:
    per source, every batch of it as a build has just read it (landing_read, whole), whose batches are indexed from
    those rows instead of reading the landing again."""
    cached: list[DataFrame] = []
    try:
        return _index_new(spark, pipeline, indexed(spark, pipeline), read or {}, cached)
    finally:
        for df in cached:
            df.unpersist()


def _index_new(
    spark: SparkSession,
    pipeline: Pipeline,
    index: dict[str, dict[str, set[date]]],
    read: dict[str, LandingRead],
    cached: list[DataFrame],
) -> dict[str, dict[str, set[date]]]:
    """`update`, given the index so far; frames it caches are added to `cached`."""
    parts = []
    partitions = pipeline.partitions
    for source in pipeline.sources:
        # The batches the build read, or those listed now: any landed since is indexed by the next update.
        build_read = read.get(source.name)
        if build_read is not None:
            landed, known = build_read.rows, build_read.batches
        else:
            landed, known = None, sorted(map(landing.batch_name, landing.batch_dirs(source)))
        new = sorted(set(known) - set(index[source.name]))
        if new:
            # A batch's own day, and that day clamped into the partitions: where quarantine files its rows that have
            # no valid day.
            own_days = spark.createDataFrame(
                [(batch, day) for batch in map(date.fromisoformat, new) for day in {batch, partitions.clamped(batch)}],
                "batch date, day date",
            )
            if source.kind is SourceKind.EVENTS:
                days_of = _event_days(spark, source, new, known, landed, cached)
            else:
                days_of = _dimension_days(spark, source, new, landed, partitions)
            parts.append(days_of.unionByName(own_days).withColumn("dataset", F.lit(source.name)))
    if not parts:
        return index
    rows = parts[0]
    for part in parts[1:]:
        rows = rows.unionByName(part)
    added = [
        r
        for r in rows.select("dataset", "batch", "day").distinct().collect()
        if r.day not in index[r.dataset].get(r.batch.isoformat(), ())
    ]
    (
        spark.createDataFrame([tuple(r) for r in added], _SCHEMA)
        .write.format("delta")
        .mode("append")
        .save(control_path(pipeline.name, INDEX_TABLE))
    )
    for r in added:
        index[r.dataset][r.batch.isoformat()].add(r.day)
    return index


def index_read(spark: SparkSession, pipeline: Pipeline, source: Source, landed: LandingRead) -> None:
    """Index the batches of `landed`, a build's read of every batch of `source`, from its rows (see `update`)."""
    update(spark, pipeline, {source.name: landed})


def holding(index: dict[str, set[date]], landed: list[str], days: list[date]) -> list[str]:
    """Of the `landed` batches, those that can hold rows of `days`: the indexed ones holding them, and every one not
    indexed yet (it may hold any day)."""
    wanted = set(days)
    return sorted(b for b in landed if b not in index or index[b] & wanted)


def batches_holding(
    spark: SparkSession, pipeline: Pipeline, source: Source, days: list[date], index_new: bool = True
) -> list[str]:
    """The batches of `source` that can hold rows of `days`. With `index_new`, any batch not indexed yet is indexed
    first (a build: the index then saves the next one from reading it whole); without, it is read whole and the index
    is left as it is (a restatement observing a few days: indexing reads the key columns of the whole landing)."""
    index = update(spark, pipeline) if index_new else indexed(spark, pipeline)
    landed = [landing.batch_name(p) for p in landing.batch_dirs(source)]
    return holding(index[source.name], landed, days)
