"""The orders pipeline as the tests name it: the declaration, its sources and tables, and the facts derived from it."""

from assets_pkg.pipeline import (
    CUSTOMER_DAILY_FEATURES,
    DAILY_CATEGORY_REVENUE,
    DAILY_REVENUE,
    DIM_PRODUCT,
    FACT_ORDER_ITEM,
    QUARANTINE_ORDER_ITEMS,
    STG_ORDER_ITEMS,
)
from assets_pkg.pipeline import pipeline as ORDERS
from assets_pkg.sources import ORDER_ITEMS, PRODUCTS

__all__ = [
    "BY_NAME",
    "LANDING_ORDER_ITEMS",
    "LANDING_PRODUCTS",
    "downstream",
    "with_side_tables",
    "CUSTOMER_DAILY_FEATURES",
    "DAILY_CATEGORY_REVENUE",
    "DAILY_REVENUE",
    "DAY_COLUMN",
    "DIM_PRODUCT",
    "FACT_ORDER_ITEM",
    "ORDERS",
    "ORDER_ITEMS",
    "ORDER_ITEM_KEY",
    "ORDER_TABLES",
    "PRODUCTS",
    "PUBLISH_ORDER",
    "QUARANTINE_ORDER_ITEMS",
    "STG_ORDER_ITEMS",
    "TABLES",
]

BY_NAME = ORDERS.by_name
TABLES = ORDERS.tables
PUBLISH_ORDER = ORDERS.publish_order
DAY_COLUMN = ORDERS.day_columns
ORDER_ITEM_KEY = list(ORDER_ITEMS.key)
# The tables by order day: every table but the dimension.
ORDER_TABLES = [t for t in PUBLISH_ORDER if t != DIM_PRODUCT]

LANDING_ORDER_ITEMS = "landing_order_items"
LANDING_PRODUCTS = "landing_products"
with_side_tables = ORDERS.with_side_tables
downstream = ORDERS.downstream
