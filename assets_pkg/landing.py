"""The landing contract: immutable, append-only Parquet batches under $LAKE_ROOT/landing/<dataset>/ingest_date=D/."""

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from datetime import date
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from assets_pkg.partitions import first_day, last_day
from resources.lake import landing_path

ORDER_ITEMS = "order_items"
PRODUCTS = "products"

ORDER_ITEM_KEY = ["order_id", "order_item_id"]
PRODUCT_KEY = ["product_id"]

MONEY = T.DecimalType(18, 2)

ORDER_ITEM_SCHEMA = T.StructType(
    [
        T.StructField("order_id", T.LongType(), False),
        T.StructField("order_item_id", T.IntegerType(), False),
        T.StructField("order_date", T.DateType(), False),
        T.StructField("customer_id", T.LongType()),
        T.StructField("product_id", T.LongType()),
        T.StructField("channel", T.StringType()),
        T.StructField("quantity", T.IntegerType()),
        T.StructField("gross_amount", MONEY),
        T.StructField("discount_amount", MONEY),
        T.StructField("cost_amount", MONEY),
        T.StructField("updated_at", T.TimestampType(), False),
        T.StructField("ingested_at", T.TimestampType(), False),
    ]
)

# A landed order item version as staging and quarantine keep it: the row, its batch and its file.
ORDER_ITEM_VERSION_COLUMNS = [*ORDER_ITEM_SCHEMA.fieldNames(), "ingest_date", "source_file"]

PRODUCT_SCHEMA = T.StructType(
    [
        T.StructField("product_id", T.LongType(), False),
        T.StructField("category", T.StringType()),
        T.StructField("status", T.StringType()),
        T.StructField("list_price", MONEY),
        T.StructField("updated_at", T.TimestampType(), False),
        T.StructField("ingested_at", T.TimestampType(), False),
    ]
)

SCHEMAS = {ORDER_ITEMS: ORDER_ITEM_SCHEMA, PRODUCTS: PRODUCT_SCHEMA}


class LandingError(RuntimeError):
    pass


def batch_dirs(dataset: str) -> list[Path]:
    root = Path(landing_path(dataset))
    return sorted(p for p in root.glob("ingest_date=*") if p.is_dir()) if root.exists() else []


def batch_name(batch_dir: Path) -> str:
    return batch_dir.name.split("=", 1)[1]


def read_landing(spark: SparkSession, dataset: str, batches: list[str] | None = None) -> DataFrame:
    """Every landed row version with its batch (`ingest_date`) and file (`source_file`, relative to the landing root).
    With `batches`, only those batch folders are read (a restatement reads what landed lately, not the history)."""
    if not batch_dirs(dataset):
        raise LandingError(f"no landed batches under {landing_path(dataset)}: run `python -m assets_pkg generate`")
    root = landing_path(dataset)
    schema = T.StructType([*SCHEMAS[dataset].fields, T.StructField("ingest_date", T.DateType())])
    if batches is None:
        df = spark.read.schema(schema).parquet(root)
    else:
        paths = [f"{root}/ingest_date={b}" for b in batches] or [root]
        df = spark.read.schema(schema).option("basePath", root).parquet(*paths)
        df = df if batches else df.where(F.lit(False))
    # The file name relative to the landing root, so the same landing copied to another lake gives the same rows.
    return df.withColumn(
        "source_file", F.substring_index(F.col("_metadata.file_path"), f"/{dataset}/", -1)
    )


def assert_new_batches(df: DataFrame, dataset: str) -> list[str]:
    """The batches (`ingest_date`s) in `df`; landed batches are immutable, so any that already exists is refused
    instead of silently changing history."""
    ingest_dates = sorted(r.ingest_date.isoformat() for r in df.select("ingest_date").distinct().collect())
    existing = {batch_name(p) for p in batch_dirs(dataset)}
    clash = sorted(set(ingest_dates) & existing)
    if clash:
        raise LandingError(f"batches already landed for {dataset}: {', '.join(clash[:5])}; landing is append-only")
    return ingest_dates


def land(batches: dict[str, DataFrame]) -> dict[str, list[str]]:
    """Land new batches, per dataset a DataFrame with an `ingest_date` column. Every clash is checked before anything
    is written, so a refused landing leaves nothing half-written."""
    landed = {dataset: assert_new_batches(df, dataset) for dataset, df in batches.items()}
    for dataset, df in batches.items():
        (
            df.select(*SCHEMAS[dataset].fieldNames(), "ingest_date")
            .repartition("ingest_date")  # one file per batch
            .write.mode("append")
            .partitionBy("ingest_date")
            .parquet(landing_path(dataset))
        )
    return landed


def event_day(dataset: str):
    """The day a landed row belongs to, as its landing asset is partitioned: an order item's order date; the day a
    product version takes effect (versions dated before the first partition take effect on it)."""
    if dataset == ORDER_ITEMS:
        return F.col("order_date")
    return F.greatest(F.to_date("updated_at"), F.lit(first_day()))


def day_versions(spark: SparkSession, dataset: str, days: Iterable[date] | None = None) -> dict[date, str]:
    """The data version of each landed day (of `days`, or every day in the partitions): a SHA-256 of the batches that
    hold rows for the day and how many each holds. Batches are immutable and only ever added, so a day's version
    changes exactly when a batch adds rows to it, and observing twice gives the same versions. Reads the day column
    only; rows with no valid day are quarantine's and have no landing day."""
    if not batch_dirs(dataset):
        return {}
    day = event_day(dataset)
    rows = read_landing(spark, dataset).where(day.between(first_day(), last_day()))
    if days is not None:
        wanted = sorted(set(days))
        if not wanted:
            return {}
        rows = rows.where(day.isin(wanted))
    counts = rows.groupBy(day.alias("day"), "ingest_date").count().collect()
    per_day: dict[date, list[str]] = defaultdict(list)
    for r in counts:
        per_day[r.day].append(f"{r.ingest_date.isoformat()}:{r['count']}")
    return {d: hashlib.sha256(";".join(sorted(parts)).encode()).hexdigest() for d, parts in sorted(per_day.items())}
