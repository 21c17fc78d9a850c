"""Delta table I/O. `overwrite_range` is the one write primitive every asset uses."""

import json
from dataclasses import dataclass
from datetime import date

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from resources.lake import table_path


class TableNotMaterialized(RuntimeError):
    pass


@dataclass(frozen=True)
class Commit:
    table: str
    version: int | None  # None: nothing to replace and nothing to write, so Delta recorded no commit
    rows_written: int
    files_added: int
    files_removed: int


def range_predicate(column: str, start: date, end: date) -> str:
    return f"{column} >= '{start.isoformat()}' AND {column} <= '{end.isoformat()}'"


def table_exists(spark: SparkSession, table: str) -> bool:
    return DeltaTable.isDeltaTable(spark, table_path(table))


def read_table(spark: SparkSession, table: str) -> DataFrame:
    if not table_exists(spark, table):
        raise TableNotMaterialized(
            f"Delta table {table!r} does not exist at {table_path(table)}: materialize it (or its upstream) first"
        )
    return spark.read.format("delta").load(table_path(table))


def read_range(spark: SparkSession, table: str, column: str, start: date, end: date) -> DataFrame:
    return read_table(spark, table).where(F.col(column).between(F.lit(start), F.lit(end)))


def overwrite_range(
    df: DataFrame, table: str, column: str, start: date, end: date, commit_info: dict
) -> Commit:
    """Atomically replace the days start..end (inclusive) of `table` with `df`, in one Delta commit.

    `replaceWhere` removes exactly the partitions in the range (days in the range that `df` has no rows for end up
    empty, so a key moved to another day leaves no trace) and Delta rejects the commit if `df` holds a row outside
    the range: a write can never delete or add anything outside its range. Partitioning by the day keeps each day in
    files of its own, so files of other days are never rewritten.
    """
    spark = df.sparkSession
    path = table_path(table)
    metadata = json.dumps(commit_info, sort_keys=True, default=str)
    (
        df.repartition(column)  # one file per day instead of one per day per task
        .write.format("delta")
        .mode("overwrite")
        .option("replaceWhere", range_predicate(column, start, end))
        .option("userMetadata", metadata)
        .partitionBy(column)
        .save(path)
    )
    # Other writers may commit to the same table concurrently (disjoint ranges): find our commit by its metadata.
    for entry in DeltaTable.forPath(spark, path).history(20).select("version", "userMetadata", "operationMetrics").collect():
        if entry.userMetadata == metadata:
            metrics = entry.operationMetrics or {}
            return Commit(
                table=table,
                version=entry.version,
                rows_written=int(metrics.get("numOutputRows", 0)),
                files_added=int(metrics.get("numFiles", 0)),
                files_removed=int(metrics.get("numRemovedFiles", 0)),
            )
    # Delta skips recording a commit with no actions (an empty range written empty).
    return Commit(table=table, version=None, rows_written=0, files_added=0, files_removed=0)
