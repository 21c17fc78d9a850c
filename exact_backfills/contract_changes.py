"""A change of a source's contract that would refuse files landed and published before it: a column taken out of
the schema (or retyped) without declaring it (`ColumnDropped`, `ColumnAdded`, `ColumnRetyped`). Each such file would
be refused by name and quarantined as one row, and the rows staging publishes from it would disappear at its next
build. So the files are named before anything is written: a plan refuses to be promoted, a write is refused, in one
line each."""

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from exact_backfills import landing
from exact_backfills.declare import FILE_COLUMN, Staging
from resources.delta_io import read_table, table_exists


def newly_refused(spark: SparkSession, table: Staging) -> list[landing.Refusal]:
    """The landed files the source's contract refuses now that `table` holds rows from: it accepted them before. A
    Spark job only when the contract refuses a file at all."""
    refused = {r.file: r for r in landing.refused_files(table.source) if r.batch is not None}
    if not refused or not table_exists(table.name):
        return []
    held = read_table(spark, table.name).where(F.col(FILE_COLUMN).isin(list(refused))).select(FILE_COLUMN)
    return [refused[r[0]] for r in sorted(held.distinct().collect())]


def describe(table: Staging, files: list[landing.Refusal]) -> str:
    """Why a change of the contract is refused, naming the files (the first three) and what to declare instead."""
    named = "; ".join(f"{r.file}: {r.reason}" for r in files[:3]) + (
        f"; and {len(files) - 3} more" if len(files) > 3 else ""
    )
    return (
        f"{table.source.name}'s contract now refuses {len(files)} landed file(s) {table.name} holds rows from "
        f"({named}): declare the change (ColumnDropped for a column taken out, ColumnAdded for one added, "
        "ColumnRetyped for one widened) so the batches landed before it keep counting, or withdraw the files"
    )
