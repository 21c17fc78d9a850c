"""The orders pipeline's logic as pure functions of DataFrames: deterministic (no clock, no randomness), so re-running
a range over the same landing data gives the same rows. (Staging and the product dimension are the machinery's builds
of their sources.)"""

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from exact_backfills import valid_to

MONEY = T.DecimalType(18, 2)


def product_validity(changes: DataFrame) -> DataFrame:
    """valid_from..valid_to (inclusive, open-ended for the current version) from the product change history."""
    return valid_to(changes, ["product_id"])


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
