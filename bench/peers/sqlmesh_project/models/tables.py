"""The project's tables as SQLMesh Python models: INCREMENTAL_BY_TIME_RANGE, daily, Delta, each running the
project's own build (bench/peers/sqlmesh_builds.py) for its batch, with the audits a user would configure: keys not
null and unique, and each table's reconciliation with its upstream, day by day (the project's measures)."""

import os
import typing as t
from datetime import datetime

from pyspark.sql import DataFrame
from sqlglot import exp
from sqlmesh import ExecutionContext, model
from sqlmesh.core.model.kind import ModelKindName

from assets_pkg.tables import BY_NAME, DAY_COLUMN
from bench.peers.sqlmesh_builds import COLUMNS, SCHEMA, build

# The project's reconciliation measures (tables.py), as (this table's, the upstream table's) SQL aggregates.
_FACT_VS_STG = [
    ("count(1)", "count(1)"),
    ("sum(gross_amount)", "sum(gross_amount)"),
    ("sum(discount_amount)", "sum(discount_amount)"),
    ("sum(net_amount)", "sum(gross_amount - discount_amount)"),
]
_MART_VS_FACT = {
    "daily_revenue": ["gross_amount", "discount_amount", "net_amount"],
    "customer_daily_features": ["net_amount"],
    "daily_category_revenue": ["gross_amount", "net_amount"],
}


def _struct(aggregates: list[str]) -> exp.Expression:
    # Both sides as DECIMAL(38,2): sums of DECIMAL(18,2) and of their difference differ in precision.
    return exp.maybe_parse(
        "struct(" + ", ".join(f"CAST({a} AS DECIMAL(38,2))" for a in aggregates) + ")", dialect="spark"
    )


def _audits(table: str) -> list:
    key = BY_NAME[table].key if table in BY_NAME else ["quarantine_day", "order_id", "order_item_id"]
    columns = [exp.column(c) for c in key]
    audits: list = [("not_null", {"columns": columns})]
    if table in BY_NAME:  # quarantine may hold a key twice on a day (two bad versions): no uniqueness
        audits.append(("unique_combination_of_columns", {"columns": columns}))
    pairs = _FACT_VS_STG if table == "fact_order_item" else None
    if table in _MART_VS_FACT:
        pairs = [("sum(item_count)", "count(1)"), *[(f"sum({m})", f"sum({m})") for m in _MART_VS_FACT[table]]]
    if pairs:
        upstream = "stg_order_items" if table == "fact_order_item" else "fact_order_item"
        audits.append(
            (
                "reconciles_by_day",
                {
                    "upstream": exp.to_table(f"{SCHEMA}.{upstream}"),
                    "here": _struct([h for h, _ in pairs]),
                    "there": _struct([u for _, u in pairs]),
                },
            )
        )
    return audits


def _spec(table: str, depends_on: list[str]) -> dict[str, t.Any]:
    batch = os.environ.get("PEER_BATCH_SIZE")
    return dict(
        name=f"{SCHEMA}.{table}",
        kind=dict(
            name=ModelKindName.INCREMENTAL_BY_TIME_RANGE,
            time_column=DAY_COLUMN[table],
            batch_size=int(batch) if batch else None,
        ),
        cron="@daily",
        start=os.environ["PARTITION_START_DATE"],
        end=os.environ["PARTITION_END_DATE"],
        table_format=os.environ.get("PEER_TABLE_FORMAT", "delta"),
        columns=COLUMNS[table],
        depends_on=[f"{SCHEMA}.{d}" for d in depends_on],
        audits=_audits(table),
    )


@model(**_spec("stg_order_items", []))
def stg_order_items(context: ExecutionContext, start: datetime, end: datetime, **kwargs: t.Any) -> DataFrame:
    return build(context, "stg_order_items", start, end)


# After staging, whose build made its rows (sqlmesh_builds._staged).
@model(**_spec("quarantine_order_items", ["stg_order_items"]))
def quarantine_order_items(context: ExecutionContext, start: datetime, end: datetime, **kwargs: t.Any) -> DataFrame:
    return build(context, "quarantine_order_items", start, end)


@model(**_spec("dim_product", []))
def dim_product(context: ExecutionContext, start: datetime, end: datetime, **kwargs: t.Any) -> DataFrame:
    return build(context, "dim_product", start, end)


@model(**_spec("fact_order_item", ["stg_order_items", "dim_product"]))
def fact_order_item(context: ExecutionContext, start: datetime, end: datetime, **kwargs: t.Any) -> DataFrame:
    return build(context, "fact_order_item", start, end)


@model(**_spec("daily_revenue", ["fact_order_item"]))
def daily_revenue(context: ExecutionContext, start: datetime, end: datetime, **kwargs: t.Any) -> DataFrame:
    return build(context, "daily_revenue", start, end)


@model(**_spec("customer_daily_features", ["fact_order_item"]))
def customer_daily_features(context: ExecutionContext, start: datetime, end: datetime, **kwargs: t.Any) -> DataFrame:
    return build(context, "customer_daily_features", start, end)


@model(**_spec("daily_category_revenue", ["fact_order_item"]))
def daily_category_revenue(context: ExecutionContext, start: datetime, end: datetime, **kwargs: t.Any) -> DataFrame:
    return build(context, "daily_category_revenue", start, end)
