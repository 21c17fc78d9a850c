"""Which landed batches can hold a day's rows: the control table `landing_batch_days`, one row per (dataset, batch,
day), written when a build first sees a batch. A build of a few days then reads only those batches, not the whole
landing (what each read scans is recorded in its materializations: see delta_io.Scan).

A batch of order items can hold rows of day D when
- one of its rows is dated D, or would be quarantined on D: a row breaking the contract is filed on its order date or
  on its batch's day clamped into the partitions (quarantine.py), so a batch always indexes its own day and that one.
  Days outside the partitions are indexed too: should PARTITION_START_DATE or PARTITION_END_DATE later widen them,
  a narrowed build of a newly covered day still finds every batch holding its rows;
- it holds a version of an order item that has a version dated D in any batch: staging takes an item's latest version
  wherever it is, so building D needs every batch holding the item, the one that moved it away from D included.
A batch of products can hold the days its versions take effect on (and, like any batch, its own day).

Indexing new batches reads the key and date columns of the landing once, to link them to the older batches holding
the same items; a build that reads the whole landing anyway indexes the batches it read from those same rows
(`index_read`), so that the first narrowed build after it reads no history. Batches are immutable, so a row of the index
stays true; a file taken out of the landing later (`withdraw`) leaves a superset, which reads a batch too many, never
one too few."""

from collections import defaultdict
from datetime import date

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from exact_backfills import landing
from exact_backfills.landing import ORDER_ITEM_KEY, LandingRead
from exact_backfills.partitions import first_day, last_day
from resources.delta_io import table_exists
from resources.lake import table_path

INDEX_TABLE = "landing_batch_days"
_SCHEMA = "dataset string, batch date, day date"


def _clamped(batch: str) -> date:
    """A batch's own day, clamped into the partitions: where quarantine files its rows that have no valid day."""
    return min(max(date.fromisoformat(batch), first_day()), last_day())


def _order_item_days(
    spark: SparkSession, new: list[str], known: list[str], landed: DataFrame | None, cached: list[DataFrame]
) -> DataFrame:
    # The batches listed now only: one landing meanwhile is indexed, whole, by the next update.
    dated = (
        (landed if landed is not None else landing.read_landing(spark, landing.ORDER_ITEMS))
        .select(
            *ORDER_ITEM_KEY,
            F.col("ingest_date").alias("batch"),
            F.col("order_date").alias("day"),
        )
        .where(F.col("batch").isin([date.fromisoformat(b) for b in known]))
    )
    if landed is None:  # read once for both of its uses below
        dated = dated.persist()
        cached.append(dated)
    arrived = dated.where(F.col("batch").isin([date.fromisoformat(b) for b in new]))
    own = arrived.where(F.col("day").isNotNull()).select("batch", "day")
    if set(new) != set(known):  # the items the new batches hold, in any batch
        keys = (
            arrived.where(F.col("order_id").isNotNull() & F.col("order_item_id").isNotNull())
            .select(*ORDER_ITEM_KEY)
            .distinct()
        )
        dated = dated.join(keys, ORDER_ITEM_KEY, "left_semi")
    # Every version of those items, in any batch: each of their batches holds each of their days. An item in one batch
    # only adds nothing to that batch's own days.
    per_item = (
        dated.groupBy(*ORDER_ITEM_KEY)
        .agg(F.collect_set("batch").alias("batches"), F.collect_set("day").alias("days"))
        .where(F.size("batches") > 1)
    )
    linked = per_item.select(F.explode("batches").alias("batch"), "days").select(
        "batch", F.explode("days").alias("day")
    )
    return own.unionByName(linked)


def _product_days(
    spark: SparkSession, new: list[str], known: list[str], landed: DataFrame | None, cached: list[DataFrame]
) -> DataFrame:
    versions = landing.read_landing(spark, landing.PRODUCTS, new) if landed is None else landed
    versions = versions.where(F.col("ingest_date").isin([date.fromisoformat(b) for b in new]))
    return versions.select(F.col("ingest_date").alias("batch"), landing.event_day(landing.PRODUCTS).alias("day"))


_DAYS_OF_NEW_BATCHES = {landing.ORDER_ITEMS: _order_item_days, landing.PRODUCTS: _product_days}


def indexed(spark: SparkSession) -> dict[str, dict[str, set[date]]]:
    """dataset -> batch -> its days, as indexed (batches not indexed yet are not in it)."""
    index: dict[str, dict[str, set[date]]] = defaultdict(lambda: defaultdict(set))
    if table_exists(INDEX_TABLE):
        for r in spark.read.format("delta").load(table_path(INDEX_TABLE)).collect():
            index[r.dataset][r.batch.isoformat()].add(r.day)
    return index


def update(spark: SparkSession, read: dict[str, LandingRead] | None = None) -> dict[str, dict[str, set[date]]]:
    """Index the batches not indexed yet (one commit, none when every batch is), and return the whole index. `read`:
    per dataset, every batch of it as a build has just read it (landing_read, whole), whose batches are indexed from
    those rows instead of reading the landing again."""
    cached: list[DataFrame] = []
    try:
        return _index_new(spark, indexed(spark), read or {}, cached)
    finally:
        for df in cached:
            df.unpersist()


def _index_new(
    spark: SparkSession,
    index: dict[str, dict[str, set[date]]],
    read: dict[str, LandingRead],
    cached: list[DataFrame],
) -> dict[str, dict[str, set[date]]]:
    """`update`, given the index so far; frames it caches are added to `cached`."""
    parts = []
    for dataset, days_of in _DAYS_OF_NEW_BATCHES.items():
        # The batches the build read, or those listed now: any landed since is indexed by the next update.
        build_read = read.get(dataset)
        if build_read is not None:
            landed, known = build_read.rows, build_read.batches
        else:
            landed, known = None, sorted(map(landing.batch_name, landing.batch_dirs(dataset)))
        new = sorted(set(known) - set(index[dataset]))
        if new:
            own_days = spark.createDataFrame(
                [(date.fromisoformat(b), day) for b in new for day in {date.fromisoformat(b), _clamped(b)}],
                "batch date, day date",
            )
            parts.append(
                days_of(spark, new, known, landed, cached).unionByName(own_days).withColumn("dataset", F.lit(dataset))
            )
    if not parts:
        return index
    rows = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    added = [
        r
        for r in rows.select("dataset", "batch", "day").distinct().collect()
        if r.day not in index[r.dataset].get(r.batch.isoformat(), ())
    ]
    (
        spark.createDataFrame([tuple(r) for r in added], _SCHEMA)
        .write.format("delta")
        .mode("append")
        .save(table_path(INDEX_TABLE))
    )
    for r in added:
        index[r.dataset][r.batch.isoformat()].add(r.day)
    return index


def index_read(spark: SparkSession, dataset: str, landed: LandingRead) -> None:
    """Index the batches of `landed`, a build's read of every batch of `dataset`, from its rows (see `update`)."""
    update(spark, {dataset: landed})


def holding(index: dict[str, set[date]], landed: list[str], days: list[date]) -> list[str]:
    """Of the `landed` batches, those that can hold rows of `days`: the indexed ones holding them, and every one not
    indexed yet (it may hold any day)."""
    wanted = set(days)
    return sorted(b for b in landed if b not in index or index[b] & wanted)


def batches_holding(spark: SparkSession, dataset: str, days: list[date], index_new: bool = True) -> list[str]:
    """The batches of `dataset` that can hold rows of `days`. With `index_new`, any batch not indexed yet is indexed
    first (a build: the index then saves the next one from reading it whole); without, it is read whole and the index
    is left as it is (a restatement observing a few days: indexing reads the key columns of the whole landing)."""
    index = update(spark) if index_new else indexed(spark)
    landed = [landing.batch_name(p) for p in landing.batch_dirs(dataset)]
    return holding(index[dataset], landed, days)
