"""The orders pipeline's sources: what lands, under the landing contract."""

from pyspark.sql import types as T

from assets_pkg.transforms import MONEY
from exact_backfills import Rule, Source, SourceKind

ORDER_ITEMS = Source(
    "order_items",
    schema=T.StructType(
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
    ),
    key=["order_id", "order_item_id"],
    day="order_date",
    newest="updated_at",
    loaded_at="ingested_at",
    rules=[
        Rule("null_reference", "customer_id IS NULL OR product_id IS NULL"),
        # daily_revenue's key: a null would fail it for the whole day.
        Rule("null_channel", "channel IS NULL"),
        Rule("negative_or_null_quantity", "quantity IS NULL OR quantity < 0"),
        Rule(
            "negative_or_null_amount",
            "gross_amount < 0 OR discount_amount < 0 OR cost_amount < 0 OR gross_amount IS NULL "
            "OR discount_amount IS NULL OR cost_amount IS NULL",
        ),
    ],
    description="Order item versions: delivered more than once, corrected days later (some to another order day).",
)

PRODUCTS = Source(
    "products",
    schema=T.StructType(
        [
            T.StructField("product_id", T.LongType(), False),
            T.StructField("category", T.StringType()),
            T.StructField("status", T.StringType()),
            T.StructField("list_price", MONEY),
            T.StructField("updated_at", T.TimestampType(), False),
            T.StructField("ingested_at", T.TimestampType(), False),
        ]
    ),
    key=["product_id"],
    day="updated_at",
    newest="updated_at",
    loaded_at="ingested_at",
    kind=SourceKind.DIMENSION,
    description="Product versions: a status change takes effect on the day it is made, some landing late.",
)
