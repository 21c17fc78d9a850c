"""What the SQLMesh peer's Python models run: the project's own builds (exact_backfills.builds), as bench/run.py's
`_bare` does, with upstream tables read from the peer's own (SQLMesh-managed) tables.

Lives outside the SQLMesh project folder on purpose: SQLMesh serializes the code of a project's own modules into its
snapshots, but imports modules from elsewhere, so the cache below is one object shared by the models in a process."""

from datetime import date, datetime
from typing import Any

from pyspark.sql import DataFrame

from assets_pkg.pipeline import QUARANTINE_ORDER_ITEMS, STG_ORDER_ITEMS, pipeline
from exact_backfills.builds import Staged
from exact_backfills.builds import build as build_days
from exact_backfills.partitions import days as day_range
from resources.delta_io import day_filter

SCHEMA = "sqlmesh_peer"

_ITEM = {
    "order_id": "bigint",
    "order_item_id": "int",
    "order_date": "date",
    "customer_id": "bigint",
    "product_id": "bigint",
    "channel": "string",
    "quantity": "int",
    "gross_amount": "decimal(18,2)",
    "discount_amount": "decimal(18,2)",
    "cost_amount": "decimal(18,2)",
    "updated_at": "timestamp",
    "ingested_at": "timestamp",
    "ingest_date": "date",
    "source_file": "string",
}
_MONEY = "decimal(18,2)"
# Python models must declare their columns; these are the types the project's builds produce (as `_bare` writes them).
COLUMNS: dict[str, dict[str, str]] = {
    "stg_order_items": _ITEM,
    "quarantine_order_items": {"quarantine_day": "date", "reason": "string", **_ITEM},
    "dim_product": {
        "product_id": "bigint",
        "valid_from": "date",
        "category": "string",
        "status": "string",
        "list_price": _MONEY,
        "updated_at": "timestamp",
    },
    "fact_order_item": {
        "order_item_sk": "bigint",
        **{c: t for c, t in _ITEM.items() if c not in ("updated_at", "ingested_at", "ingest_date", "source_file")},
        "net_amount": _MONEY,
        "product_category": "string",
        "product_status": "string",
    },
    "daily_revenue": {
        "order_date": "date",
        "channel": "string",
        "item_count": "bigint",
        "order_count": "bigint",
        "gross_amount": _MONEY,
        "discount_amount": _MONEY,
        "net_amount": _MONEY,
        "cost_amount": _MONEY,
    },
    "customer_daily_features": {
        "customer_id": "bigint",
        "order_date": "date",
        "order_count": "bigint",
        "item_count": "bigint",
        "total_quantity": "bigint",
        "distinct_products": "bigint",
        "gross_amount": _MONEY,
        "net_amount": _MONEY,
        "discount_rate": "decimal(9,4)",
        "passive_product_items": "bigint",
    },
    "daily_category_revenue": {
        "order_date": "date",
        "product_category": "string",
        "item_count": "bigint",
        "order_count": "bigint",
        "gross_amount": _MONEY,
        "net_amount": _MONEY,
    },
}

# Staging's build also yields quarantine's rows (one read of the landing for both, as in `_bare`); the quarantine
# model, which runs after staging (it depends on it), takes them from here instead of building staging again.
_staged: dict[tuple[date, date], Staged] = {}


def _day(value: Any) -> date:
    return value.date() if isinstance(value, datetime) else value


def build(context: Any, table: str, start: Any, end: Any) -> DataFrame:
    """The rows of `table` for the batch start..end (SQLMesh's inclusive bounds), by the project's build."""
    spark = context.spark
    days = day_range(_day(start), _day(end))

    def read(upstream: str, upstream_days: list[date]) -> DataFrame:
        physical = context.resolve_table(f"{SCHEMA}.{upstream}")
        return spark.table(physical).where(day_filter(pipeline.day_columns[upstream], upstream_days))

    def built(name: str) -> Staged:
        return build_days(spark, pipeline, pipeline.by_name[name], days, read)

    if table == QUARANTINE_ORDER_ITEMS:
        staged = _staged.pop((days[0], days[-1]), None) or built(STG_ORDER_ITEMS)
        return staged.side_tables[QUARANTINE_ORDER_ITEMS]
    staged = built(table)
    if table == STG_ORDER_ITEMS:
        _staged[(days[0], days[-1])] = staged
    return staged.table
