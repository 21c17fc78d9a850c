"""The vacuum as a Dagster job (`vacuum_tables`), what the `vacuum` command runs, and its nightly schedule: each
table's retention set to the rollback horizon and its files older than that removed (retention.py). It claims the
lake-writes pool: setting a table's retention is a commit."""

from collections.abc import Iterator
from typing import Any

from dagster import (
    DefaultScheduleStatus,
    JobDefinition,
    OpExecutionContext,
    Out,
    Output,
    ScheduleDefinition,
    in_process_executor,
    job,
    op,
)
from dagster_pyspark import LazyPySparkResource

from exact_backfills import liveness, retention
from exact_backfills.dagster_names import LAKE_WRITES_POOL, PIPELINE_TAG, VACUUM_JOB, VACUUM_OP, VACUUM_SCHEDULE
from exact_backfills.declare import Pipeline
from resources.settings import settings
from resources.spark import session_of, spark_resource


def vacuum_job(pipeline: Pipeline) -> JobDefinition:
    @op(name=VACUUM_OP, out=Out(list), pool=LAKE_WRITES_POOL)
    def vacuum_op(context: OpExecutionContext, pyspark: LazyPySparkResource) -> Iterator[Any]:
        liveness.record(context, pipeline)
        found = retention.vacuum(session_of(pyspark), pipeline)
        for vacuumed in found:
            context.log.info(vacuumed.describe())
        yield Output([v.describe() for v in found])

    @job(
        name=VACUUM_JOB,
        executor_def=in_process_executor,
        resource_defs={"pyspark": spark_resource(settings(), short_runs=True)},
        tags={PIPELINE_TAG: pipeline.name},
        description="Set every table's retention to the rollback horizon (ROLLBACK_HORIZON_DAYS) and remove the "
        "files older than it.",
    )
    def vacuum_tables() -> None:
        vacuum_op()

    return vacuum_tables


def vacuum_schedule(pipeline: Pipeline, vacuum: JobDefinition) -> ScheduleDefinition:
    """Nightly at 03:00 in the pipeline's timezone; running by default when its calendar moves with time (a pipeline
    over a fixed range of days, as the demo and the tests, turns it on in the UI when it wants it)."""
    calendar = pipeline.calendar
    assert calendar is not None
    return ScheduleDefinition(
        name=VACUUM_SCHEDULE,
        job=vacuum,
        cron_schedule="0 3 * * *",
        execution_timezone=calendar.timezone,
        default_status=DefaultScheduleStatus.RUNNING if pipeline.partitions.moving else DefaultScheduleStatus.STOPPED,
        description=f"Vacuum pipeline {pipeline.name}'s tables under the rollback horizon, nightly.",
    )
