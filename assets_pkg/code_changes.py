"""Code changes in Dagster: each table's code version is on its asset (code_versions.py), and the days older code
built fail `built_by_current_code`, in every table they reach. A job evaluates the check on every published day, and
a sensor launches it when the code loaded is not the code it last checked (a transform fixed, the location reloaded),
so the check's Partitions view shows exactly the stale days before anything is rebuilt."""

import json
from collections.abc import Iterator
from typing import Any

from dagster import (
    AssetKey,
    DefaultSensorStatus,
    OpExecutionContext,
    Out,
    Output,
    RunRequest,
    SensorEvaluationContext,
    SkipReason,
    in_process_executor,
    job,
    op,
    sensor,
)
from dagster_pyspark import LazyPySparkResource

from assets_pkg import code_versions, liveness, recording
from assets_pkg.dagster_names import CODE_CHECK_JOB, CODE_CHECK_OP
from assets_pkg.publish import CODE_VERSION
from assets_pkg.tables import PUBLISH_ORDER
from assets_pkg.verification import code_outcomes, stale_code_days
from resources import audit
from resources.settings import settings
from resources.spark import session_of, spark_resource


@op(name=CODE_CHECK_OP, out=Out(dict))
def check_code_versions_op(context: OpExecutionContext, pyspark: LazyPySparkResource) -> Iterator[Any]:
    """built_by_current_code on every published day of every table: failing, saying why, on the days stale by code;
    passing on the others. Writes nothing to the lake."""
    liveness.record(context)
    spark = session_of(pyspark)
    stale = stale_code_days(spark)
    written = audit.built_by(spark)
    for table in PUBLISH_ORDER:
        days = sorted(written.get(table, {}))
        if days:
            yield from recording.check_evaluations(context.instance, table, code_outcomes(table, days, stale[table]))
    summary = {table: len(days) for table, days in stale.items() if days}
    context.log.info(f"days stale by code: {summary or 'none'}")
    yield Output({"versions": code_versions.current(), "stale_days": summary})


# A check of the whole history: a short run (resources.spark).
@job(
    name=CODE_CHECK_JOB,
    executor_def=in_process_executor,
    resource_defs={"pyspark": spark_resource(settings(), short_runs=True)},
    description="Evaluate built_by_current_code on every published day: which days older code built.",
)
def check_code_versions_job() -> None:
    check_code_versions_op()


def _latest_built_by(context: SensorEvaluationContext, table: str) -> str | None:
    event = context.instance.get_latest_materialization_event(AssetKey(table))
    if event is None or event.asset_materialization is None:
        return None
    value = event.asset_materialization.metadata.get(CODE_VERSION)
    return str(value.value) if value is not None else None


@sensor(
    job=check_code_versions_job,
    minimum_interval_seconds=settings().late_data_sensor_interval_s,
    default_status=DefaultSensorStatus.RUNNING,
    description="Launches check_code_versions when the code loaded is not the code last checked: the days older code "
    "built then fail built_by_current_code. A tick compares versions only: Spark starts in the run.",
)
def code_version_sensor(context: SensorEvaluationContext) -> RunRequest | SkipReason:
    versions = code_versions.current()
    state = json.dumps(versions, sort_keys=True)
    if state == context.cursor:
        return SkipReason("the code loaded is the code last checked")
    if context.cursor is None:
        # First tick: nothing checked yet. A lake whose latest writes are by this code needs no check.
        older = [t for t in PUBLISH_ORDER if _latest_built_by(context, t) not in (None, versions[t])]
        if not older:
            context.update_cursor(state)
            return SkipReason("every table was last written by the code loaded now")
    context.update_cursor(state)
    return RunRequest(run_key=f"code:{state}", job_name=CODE_CHECK_JOB)
