"""A renamed table (declared `Table(new, ..., renamed_from=old)`): its days move from the table it was published as
before, without a rebuild, through the one write path: the rows `old` holds, checked as any write (its key, its
reconciliation), committed to `new` in one commit, recorded in the audit trail with the code version that built each
day there and in Dagster as the new asset's materializations. The rename alone changes no code version
(code_versions.py), so nothing is stale by code after it. `old` is left as it was, until `retire` archives or drops
it: a rename is never a silent deletion."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date
from typing import Any

from dagster import JobDefinition, OpExecutionContext, Out, Output, in_process_executor, job, op
from dagster_pyspark import LazyPySparkResource
from pyspark.sql import SparkSession

from exact_backfills import liveness, recording
from exact_backfills.dagster_names import LAKE_WRITES_POOL, PIPELINE_TAG, RENAME_JOB, RENAME_OP
from exact_backfills.declare import Pipeline
from exact_backfills.publish import Change, Operation, Publication, Refused, Renamed, RunInfo, day_ranges, publish
from resources import audit
from resources.delta_io import table_exists
from resources.settings import settings
from resources.spark import session_of, spark_resource


@dataclass(frozen=True)
class PendingRename:
    """A renamed table's days its former name published and it has not yet."""

    table: str
    former: str
    days: list[date]

    def describe(self, command: str) -> str:
        return (
            f"{self.table}: renamed from {self.former}; {len(self.days)} day(s) to move without a rebuild: "
            f"{day_ranges(self.days)} (`{command} rename`)"
        )


def pending_renames(
    pipeline: Pipeline, published: audit.BuiltBy, on_lake: Callable[[str], bool] = table_exists
) -> list[PendingRename]:
    """Each renamed table whose former name, still on the lake, published days of the partitions it has not."""
    found = []
    for table, former in pipeline.renamed.items():
        days = sorted(
            d for d in set(published.get(former, {})) - set(published.get(table, {})) if d in pipeline.partitions
        )
        if days and on_lake(former):
            found.append(PendingRename(table, former, days))
    return found


def rename(spark: SparkSession, pipeline: Pipeline, run: RunInfo) -> dict[str, Publication]:
    """Every pending rename, in one change: each renamed table's days from its former name's rows."""
    published = audit.built_by(spark, pipeline.name)
    pending = pending_renames(pipeline, published)
    if not pending:
        return {}
    change = Change(
        Operation.RENAME,
        days={p.table: p.days for p in pending},
        sources={p.table: Renamed(p.former, {d: published[p.former][d] for d in p.days}) for p in pending},
    )
    return publish(spark, pipeline, change, run)


def rename_job(pipeline: Pipeline) -> JobDefinition:
    """The move of every renamed table's days as a Dagster job: what `rename` runs, launchable from the UI."""

    @op(name=RENAME_OP, out=Out(dict), pool=LAKE_WRITES_POOL)
    def rename_op(context: OpExecutionContext, pyspark: LazyPySparkResource) -> Iterator[Any]:
        liveness.record(context, pipeline)
        try:
            publications = rename(session_of(pyspark), pipeline, RunInfo.of(context.run))
        except Refused as refused:
            raise recording.refusal(str(refused)) from None
        for table, publication in publications.items():
            yield from recording.publication_events(context, table, publication)
        yield Output({t: [d.isoformat() for d in p.days] for t, p in publications.items()})

    @job(
        name=RENAME_JOB,
        executor_def=in_process_executor,
        resource_defs={"pyspark": spark_resource(settings(), short_runs=True)},
        tags={PIPELINE_TAG: pipeline.name},
        description="Move each renamed table's days from the name it was published as before, without a rebuild "
        "(see `rename`).",
    )
    def rename_tables() -> None:
        rename_op()

    return rename_tables
