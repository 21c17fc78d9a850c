"""The pipeline's logic as pure functions of DataFrames: deterministic (no clock, no randomness), so re-running a
range over the same landing data gives the same rows."""

from datetime import date

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from exact_backfills.landing import MONEY, ORDER_ITEM_KEY, ORDER_ITEM_SCHEMA, ORDER_ITEM_VERSION_COLUMNS, PRODUCT_KEY
from resources.delta_io import day_filter


def latest_versions(versions: DataFrame, key: list[str], columns: list[str], then: tuple = ()) -> DataFrame:
    """One row per key: the latest `updated_at`, then the latest `ingested_at`, then the latest file, then a hash of
    the row, so that even two different rows with equal timestamps resolve the same way on every run (`then`: more
    tie-breaks for identical rows)."""
    order = Window.partitionBy(*key).orderBy(
        F.col("updated_at").desc(),
        F.col("ingested_at").desc(),
        F.col("source_file").desc(),
        F.xxhash64(*columns).desc(),
        *then,
    )
    return versions.withColumn("_rank", F.row_number().over(order)).where("_rank = 1").drop("_rank")


def stg_order_items(versions: DataFrame, days: list[date]) -> DataFrame:
    """The current version of every order item whose current order_date is one of `days`.

    The latest version of an item is decided over all its versions in `versions`, not only those dated on `days`: a
    correction that moves an item to another day removes it from its old day. `versions` may be narrowed to the
    items that can be on the days (`mark_items_dated_on`), never to the versions dated on them.
    """
    latest = latest_versions(versions, ORDER_ITEM_KEY, ORDER_ITEM_SCHEMA.fieldNames())
    return latest.where(day_filter("order_date", days)).select(*ORDER_ITEM_VERSION_COLUMNS)


# Marks the versions of the items that have a version dated on given days.
ITEM_ON_DAYS = "_item_on_days"


def mark_items_dated_on(versions: DataFrame, days: list[date]) -> DataFrame:
    """`versions` with ITEM_ON_DAYS true on every version of the order items that have a version dated on one of
    `days`: the only items whose latest version can be on those days, with all their versions (the latest may be
    dated on another day). The keys are broadcast, so the versions are marked where they are read instead of
    shuffled: for a limited number of days."""
    keys = (
        versions.where(day_filter("order_date", days))
        .select(*ORDER_ITEM_KEY)
        .distinct()
        .withColumn(ITEM_ON_DAYS, F.lit(True))
    )
    marked = versions.join(F.broadcast(keys), ORDER_ITEM_KEY, "left")
    return marked.select(*versions.columns, F.coalesce(ITEM_ON_DAYS, F.lit(False)).alias(ITEM_ON_DAYS))


def dim_product_changes(versions: DataFrame, first_day: date, days: list[date]) -> DataFrame:
    """Product versions that take effect on each of `days` (`valid_from`), the last one of a day winning.

    Versions dated before the first partition take effect on the first partition's day. A version is valid until the
    next version of the product takes effect: a validity interval, so a re-run of an old day sees the product as it
    was that day while the table only grows with changes, not with products x days.
    """
    dated = versions.withColumn("valid_from", F.greatest(F.to_date("updated_at"), F.lit(first_day)))
    per_day = latest_versions(
        dated.where(day_filter("valid_from", days)),
        [*PRODUCT_KEY, "valid_from"],
        ["product_id", "category", "status", "list_price", "updated_at", "ingested_at"],
    )
    return per_day.select("product_id", "valid_from", "category", "status", "list_price", "updated_at")


def product_validity(changes: DataFrame) -> DataFrame:
    """valid_from..valid_to (inclusive, open-ended for the current version) from the product change history."""
    nxt = F.lead("valid_from").over(Window.partitionBy("product_id").orderBy("valid_from"))
    return changes.withColumn("valid_to", F.date_sub(nxt, 1))


def fact_order_item(stg: DataFrame, product_changes: DataFrame) -> DataFrame:
    """Order items with the product as of the order day, so a re-run of an old day reproduces it."""
    products = product_validity(product_changes).select(
        "product_id",
        "valid_from",
        "valid_to",
        F.col("category").alias("product_category"),
        F.col("status").alias("product_status"),
    )
    as_of = (
        (stg.product_id == products.product_id)
        & (stg.order_date >= products.valid_from)
        & (products.valid_to.isNull() | (stg.order_date <= products.valid_to))
    )
    return stg.join(products, as_of, "left").select(
        F.xxhash64("order_id", "order_item_id").alias("order_item_sk"),
        "order_id",
        "order_item_id",
        "order_date",
        "customer_id",
        stg.product_id,
        "channel",
        "quantity",
        "gross_amount",
        "discount_amount",
        (F.col("gross_amount") - F.col("discount_amount")).cast(MONEY).alias("net_amount"),
        "cost_amount",
        "product_category",
        "product_status",
    )


def _money_sum(column: str) -> Column:
    return F.sum(column).cast(MONEY).alias(column)


def _distinct_count(column: str) -> Column:
    """countDistinct's value (nulls not counted) without its plan, which expands every row once per distinct column
    and aggregates twice: a set per group is cheaper for groups of a day's size."""
    return F.size(F.collect_set(column)).cast("long")  # countDistinct's type: the tables keep their schema


def daily_revenue(fact: DataFrame) -> DataFrame:
    return fact.groupBy("order_date", "channel").agg(
        F.count(F.lit(1)).alias("item_count"),
        _distinct_count("order_id").alias("order_count"),
        _money_sum("gross_amount"),
        _money_sum("discount_amount"),
        _money_sum("net_amount"),
        _money_sum("cost_amount"),
    )


def daily_category_revenue(fact: DataFrame) -> DataFrame:
    """Per order_date and the product's category as of that day: items, distinct orders, gross and net."""
    return fact.groupBy("order_date", "product_category").agg(
        F.count(F.lit(1)).alias("item_count"),
        _distinct_count("order_id").alias("order_count"),
        _money_sum("gross_amount"),
        _money_sum("net_amount"),
    )


def customer_daily_features(fact: DataFrame) -> DataFrame:
    """ML features keyed (customer_id, order_date), from that day's facts only: a re-run is exact."""
    gross = F.sum("gross_amount")
    return fact.groupBy("customer_id", "order_date").agg(
        _distinct_count("order_id").alias("order_count"),
        F.count(F.lit(1)).alias("item_count"),
        F.sum("quantity").cast("long").alias("total_quantity"),
        _distinct_count("product_id").alias("distinct_products"),
        _money_sum("gross_amount"),
        _money_sum("net_amount"),
        F.when(gross > 0, F.round(F.sum("discount_amount") / gross, 4)).cast("decimal(9,4)").alias("discount_rate"),
        F.sum(F.when(F.col("product_status") == "PASSIVE", 1).otherwise(0)).alias("passive_product_items"),
    )
