"""Rows that break the landing contract go to staging's quarantine side table with the reason, the source file and the
run: nothing is dropped silently, and a bad row never fails the pipeline.

A quarantined row belongs to a day (`quarantine_day`) so that the staging run of that day rewrites it exactly: its
order_date when that is a valid partition day, otherwise its landing batch's day, clamped into the partitions.
"""

from datetime import date

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from exact_backfills.landing import ORDER_ITEM_KEY, ORDER_ITEM_VERSION_COLUMNS
from resources.delta_io import day_filter


def _reason(first_day: date, last_day: date) -> Column:
    c = F.col
    return (
        F.when(c("refused").isNotNull(), c("refused"))  # a file the landing contract refuses (see landing.py)
        .when(c("order_id").isNull() | c("order_item_id").isNull(), "null_key")
        .when(c("order_date").isNull(), "null_order_date")
        .when(c("updated_at").isNull() | c("ingested_at").isNull(), "null_timestamp")
        .when((c("order_date") < F.lit(first_day)) | (c("order_date") > F.lit(last_day)), "order_date_out_of_range")
        .when(c("order_date") > F.to_date("ingested_at"), "order_date_after_landing")
        .when(c("customer_id").isNull() | c("product_id").isNull(), "null_reference")
        .when(c("channel").isNull(), "null_channel")  # daily_revenue's key: a null would fail it for the whole day
        .when(c("quantity").isNull() | (c("quantity") < 0), "negative_or_null_quantity")
        .when(
            (c("gross_amount") < 0)
            | (c("discount_amount") < 0)
            | (c("cost_amount") < 0)
            | c("gross_amount").isNull()
            | c("discount_amount").isNull()
            | c("cost_amount").isNull(),
            "negative_or_null_amount",
        )
    )


def breaks_contract(first_day: date, last_day: date) -> Column:
    return _reason(first_day, last_day).isNotNull()


def split(versions: DataFrame, first_day: date, last_day: date) -> tuple[DataFrame, DataFrame]:
    """(rows that meet the contract, rows that do not, with `reason` and `quarantine_day`), from landed rows."""
    tagged = versions.withColumn("reason", _reason(first_day, last_day))
    in_partitions = F.greatest(F.least(F.col("ingest_date"), F.lit(last_day)), F.lit(first_day))
    rejected = tagged.where(F.col("reason").isNotNull()).withColumn(
        "quarantine_day",
        F.when(
            F.col("refused").isNotNull()
            | F.col("reason").isin(
                "null_key", "null_order_date", "null_timestamp", "order_date_out_of_range", "order_date_after_landing"
            ),
            in_partitions,
        ).otherwise(F.col("order_date")),
    )
    return tagged.where(F.col("reason").isNull()).drop("reason", "refused"), rejected


def for_days(rejected: DataFrame, days: list[date]) -> DataFrame:
    return rejected.where(day_filter("quarantine_day", days)).select(
        "quarantine_day", "reason", *ORDER_ITEM_VERSION_COLUMNS
    )


def lost_keys(versions: DataFrame, table: DataFrame, quarantined: DataFrame, days: list[date]) -> DataFrame:
    """Keys whose latest landed version (valid or not) falls on one of `days`, yet are neither in `table` nor in
    quarantine: rows that would otherwise vanish without a trace. Columns: day + the key."""
    latest = Window.partitionBy(*ORDER_ITEM_KEY).orderBy(
        F.col("updated_at").desc_nulls_last(), F.col("ingested_at").desc_nulls_last()
    )
    expected = (
        versions.where(F.col("order_id").isNotNull() & F.col("order_item_id").isNotNull())
        .withColumn("_n", F.row_number().over(latest))
        .where("_n = 1")
        .where(day_filter("order_date", days))
        .select(F.col("order_date").alias("day"), *ORDER_ITEM_KEY)
    )
    return expected.join(table.select(*ORDER_ITEM_KEY), ORDER_ITEM_KEY, "left_anti").join(
        quarantined.select(*ORDER_ITEM_KEY), ORDER_ITEM_KEY, "left_anti"
    )
