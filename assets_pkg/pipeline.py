"""The orders pipeline, declared: order items and products landed daily, staged, the fact joining each item to its
product as of the order day, and three marts reconciled with the fact day by day. Selected by default;
`EXACT_BACKFILLS_PIPELINE=assets_pkg.pipeline:pipeline` names it."""

import argparse
from datetime import date

from pyspark.sql import DataFrame, SparkSession

from assets_pkg import transforms
from assets_pkg.sources import ORDER_ITEMS, PRODUCTS
from exact_backfills import (
    AsOf,
    Calendar,
    Command,
    Demo,
    Pipeline,
    Read,
    Reconcile,
    SameDay,
    Staging,
    Table,
)
from exact_backfills.arguments import day, positive_number

STG_ORDER_ITEMS = "stg_order_items"
QUARANTINE_ORDER_ITEMS = "quarantine_order_items"
DIM_PRODUCT = "dim_product"
FACT_ORDER_ITEM = "fact_order_item"
DAILY_REVENUE = "daily_revenue"
CUSTOMER_DAILY_FEATURES = "customer_daily_features"
DAILY_CATEGORY_REVENUE = "daily_category_revenue"

_COUNT = "count(1)"


def build_fact_order_item(spark: SparkSession, days: list[date], read: Read) -> DataFrame:
    return transforms.fact_order_item(read(STG_ORDER_ITEMS), read(DIM_PRODUCT))


def build_daily_revenue(spark: SparkSession, days: list[date], read: Read) -> DataFrame:
    return transforms.daily_revenue(read(FACT_ORDER_ITEM))


def build_daily_category_revenue(spark: SparkSession, days: list[date], read: Read) -> DataFrame:
    return transforms.daily_category_revenue(read(FACT_ORDER_ITEM))


def build_customer_daily_features(spark: SparkSession, days: list[date], read: Read) -> DataFrame:
    return transforms.customer_daily_features(read(FACT_ORDER_ITEM))


def _import_tpch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scale", type=positive_number, default=0.1)
    parser.add_argument(
        "--through", type=day, default=None, help="land only the orders placed up to this day (default: every order)"
    )


def _import_tpch(spark: SparkSession, args: argparse.Namespace) -> str:
    from assets_pkg.tpch import import_tpch

    return f"landed TPC-H SF{args.scale:g}: {import_tpch(spark, args.scale, args.through)}"


def _generate(spark: SparkSession, demo: Demo) -> str:
    from assets_pkg.generate import generate

    s = generate(spark, demo.start, demo.end, demo.seed, demo.rows_per_day, demo.bad_rate)
    return (
        f"landed {s.order_item_rows} order item rows in {len(s.batches)} batches "
        f"({s.duplicates} duplicate deliveries, {s.corrections} corrections of which {s.moved_days} "
        f"move a day, {s.late_rows} late rows, {s.bad_rows} bad rows) and {s.product_rows} product "
        f"rows ({s.product_changes} status changes)"
    )


pipeline = Pipeline(
    name="orders",
    sources=[ORDER_ITEMS, PRODUCTS],
    calendar=Calendar(first_day=date(2025, 1, 1)),  # open: a partition a day, up to today (UTC)
    tables=[
        Staging(
            STG_ORDER_ITEMS,
            source=ORDER_ITEMS,
            quarantine=QUARANTINE_ORDER_ITEMS,
            description="Current version of each order item (natural key order_id + order_item_id): duplicate "
            "deliveries removed, corrections applied, by its current order_date. Rows breaking the contract go to "
            "quarantine_order_items with the reason.",
        ),
        Staging(
            DIM_PRODUCT,
            source=PRODUCTS,
            description="Product versions by the day they take effect (valid_from): the product dimension as of any "
            "day.",
        ),
        # The product as of the order day: a new product version restates the later days that ordered it.
        Table(
            FACT_ORDER_ITEM,
            key=["order_id", "order_item_id"],
            day_column="order_date",
            upstream={STG_ORDER_ITEMS: SameDay(), DIM_PRODUCT: AsOf(on=["product_id"])},
            build=build_fact_order_item,
            # Counts and amounts of the fact equal staging's, day by day.
            reconcile=Reconcile(
                STG_ORDER_ITEMS,
                {
                    "items": (_COUNT, _COUNT),
                    "gross_amount": ("sum(gross_amount)", "sum(gross_amount)"),
                    "discount_amount": ("sum(discount_amount)", "sum(discount_amount)"),
                    "net_amount": ("sum(net_amount)", "sum(gross_amount - discount_amount)"),
                },
            ),
            description="One row per order item, with net amount and the product's category and status as of the "
            "order day.",
        ),
        Table(
            DAILY_REVENUE,
            key=["order_date", "channel"],
            day_column="order_date",
            upstream={FACT_ORDER_ITEM: SameDay()},
            build=build_daily_revenue,
            reconcile=Reconcile(
                FACT_ORDER_ITEM,
                {
                    "items": ("sum(item_count)", _COUNT),
                    "gross_amount": ("sum(gross_amount)", "sum(gross_amount)"),
                    "discount_amount": ("sum(discount_amount)", "sum(discount_amount)"),
                    "net_amount": ("sum(net_amount)", "sum(net_amount)"),
                },
            ),
            description="Per order_date and channel: items, distinct orders, gross, discount, net and cost.",
        ),
        Table(
            CUSTOMER_DAILY_FEATURES,
            key=["customer_id", "order_date"],
            day_column="order_date",
            upstream={FACT_ORDER_ITEM: SameDay()},
            build=build_customer_daily_features,
            reconcile=Reconcile(
                FACT_ORDER_ITEM,
                {"items": ("sum(item_count)", _COUNT), "net_amount": ("sum(net_amount)", "sum(net_amount)")},
            ),
            description="ML feature table keyed (customer_id, order_date).",
        ),
        Table(
            DAILY_CATEGORY_REVENUE,
            key=["order_date", "product_category"],
            day_column="order_date",
            upstream={FACT_ORDER_ITEM: SameDay()},
            build=build_daily_category_revenue,
            reconcile=Reconcile(
                FACT_ORDER_ITEM,
                {
                    "items": ("sum(item_count)", _COUNT),
                    "gross_amount": ("sum(gross_amount)", "sum(gross_amount)"),
                    "net_amount": ("sum(net_amount)", "sum(net_amount)"),
                },
            ),
            description="Per order_date and the product's category as of that day: items, distinct orders, gross "
            "and net.",
        ),
    ],
    generate=_generate,
    commands=[
        Command(
            "import-tpch",
            help="land TPC-H data generated by tpchgen-cli",
            arguments=_import_tpch_arguments,
            run=_import_tpch,
        )
    ],
    description="Orders: order items and products, the fact, revenue marts and customer features.",
)
