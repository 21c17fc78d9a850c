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

from assets_pkg.pipeline import pipeline
from bench.peers.sqlmesh_builds import COLUMNS, SCHEMA, build

BY_NAME, DAY_COLUMN = pipeline.by_name, pipeline.day_columns


def _struct(aggregates: list[str]) -> exp.Expression:
    # Both sides as DECIMAL(38,2): sums of DECIMAL(18,2) and of their difference differ in precision.
    return exp.maybe_parse(
        "struct(" + ", ".join(f"CAST({a} AS DECIMAL(38,2))" for a in aggregates) + ")", dialect="spark"
    )


def _owner(side: str) -> str:
    """The table a side table is written with."""
    return pipeline.side_table_of[side]


def _audits(table: str) -> list:
    """The project's key and reconciliation checks of `table` (its declaration), as SQLMesh audits."""
    # A side table's rows are keyed by its own day and its table's key; a key may be there twice on a day (two bad
    # versions): no uniqueness.
    key = list(BY_NAME[table].key) if table in BY_NAME else [DAY_COLUMN[table], *BY_NAME[_owner(table)].key]
    columns = [exp.column(c) for c in key]
    audits: list = [("not_null", {"columns": columns})]
    if table in BY_NAME:
        audits.append(("unique_combination_of_columns", {"columns": columns}))
    rec = BY_NAME[table].reconcile if table in BY_NAME else None
    if rec:
        here = [m.aggregate for m in rec.measures.values()]
        there = [m.upstream_aggregate for m in rec.measures.values()]
        audits.append(
            (
                "reconciles_by_day",
                {
                    "upstream": exp.to_table(f"{SCHEMA}.{rec.upstream}"),
                    "here": _struct(list(here)),
                    "there": _struct(list(there)),
                },
            )
        )
    return audits


def _spec(table: str) -> dict[str, t.Any]:
    # A table depends on its upstream tables; a side table on its table, whose build made its rows.
    depends_on = list(BY_NAME[table].upstream) if table in BY_NAME else [_owner(table)]
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


@model(**_spec("stg_order_items"))
def stg_order_items(context: ExecutionContext, start: datetime, end: datetime, **kwargs: t.Any) -> DataFrame:
    return build(context, "stg_order_items", start, end)


# After staging, whose build made its rows (sqlmesh_builds._staged).
@model(**_spec("quarantine_order_items"))
def quarantine_order_items(context: ExecutionContext, start: datetime, end: datetime, **kwargs: t.Any) -> DataFrame:
    return build(context, "quarantine_order_items", start, end)


@model(**_spec("dim_product"))
def dim_product(context: ExecutionContext, start: datetime, end: datetime, **kwargs: t.Any) -> DataFrame:
    return build(context, "dim_product", start, end)


@model(**_spec("fact_order_item"))
def fact_order_item(context: ExecutionContext, start: datetime, end: datetime, **kwargs: t.Any) -> DataFrame:
    return build(context, "fact_order_item", start, end)


@model(**_spec("daily_revenue"))
def daily_revenue(context: ExecutionContext, start: datetime, end: datetime, **kwargs: t.Any) -> DataFrame:
    return build(context, "daily_revenue", start, end)


@model(**_spec("customer_daily_features"))
def customer_daily_features(context: ExecutionContext, start: datetime, end: datetime, **kwargs: t.Any) -> DataFrame:
    return build(context, "customer_daily_features", start, end)


@model(**_spec("daily_category_revenue"))
def daily_category_revenue(context: ExecutionContext, start: datetime, end: datetime, **kwargs: t.Any) -> DataFrame:
    return build(context, "daily_category_revenue", start, end)
