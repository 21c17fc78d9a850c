"""Code changes in Dagster: each table's code version is on its asset (code_versions.py), and the days older code
built fail `built_by_current_code`, in every table they reach. A job evaluates the check on every published day, and
a sensor launches it when the code loaded is not the code it last checked (a transform fixed, the location reloaded),
so the check's Partitions view shows exactly the stale days before anything is rebuilt. Two more jobs, launchable
from the UI with typed config, build a plan for the change (plans.py: nothing published changes; its metadata is a
table per table of the days that change) and promote it (exactly the changed days)."""

import json
from collections.abc import Iterator
from datetime import date
from typing import Any

from dagster import (
    AssetKey,
    Config,
    DefaultSensorStatus,
    JobDefinition,
    MetadataValue,
    OpExecutionContext,
    Out,
    Output,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    in_process_executor,
    job,
    op,
    sensor,
)
from dagster_pyspark import LazyPySparkResource
from pydantic import Field

from exact_backfills import checks, code_versions, liveness, plans, promotion, recording
from exact_backfills.dagster_names import (
    CODE_CHECK_JOB,
    CODE_CHECK_OP,
    LAKE_WRITES_POOL,
    PIPELINE_TAG,
    PLAN_JOB,
    PLAN_OP,
    PROMOTE_JOB,
    PROMOTE_OP,
)
from exact_backfills.declare import Pipeline
from exact_backfills.publish import CODE_VERSION, Refused, RunInfo
from exact_backfills.verification import code_outcomes, stale_code_days
from resources import audit
from resources.settings import settings
from resources.spark import session_of, spark_resource


def check_code_versions_job(pipeline: Pipeline) -> JobDefinition:
    @op(name=CODE_CHECK_OP, out=Out(dict))
    def check_code_versions_op(context: OpExecutionContext, pyspark: LazyPySparkResource) -> Iterator[Any]:
        """built_by_current_code on every published day of every table: failing, saying why, on the days stale by
        code; passing on the others. Writes nothing to the lake."""
        liveness.record(context, pipeline)
        spark = session_of(pyspark)
        stale = stale_code_days(spark, pipeline)
        written = audit.built_by(spark, pipeline.name)
        for table in pipeline.publish_order:
            days = sorted(written.get(table, {}))
            if days:
                outcomes = code_outcomes(pipeline, table, days, stale[table])
                yield from checks.check_evaluations(context.instance, table, outcomes)
        summary = {table: len(days) for table, days in stale.items() if days}
        context.log.info(f"days stale by code: {summary or 'none'}")
        yield Output({"versions": code_versions.current(pipeline), "stale_days": summary})

    # A check of the whole history: a short run (resources.spark).
    @job(
        name=CODE_CHECK_JOB,
        executor_def=in_process_executor,
        resource_defs={"pyspark": spark_resource(settings(), short_runs=True)},
        tags={PIPELINE_TAG: pipeline.name},
        description="Evaluate built_by_current_code on every published day: which days older code built.",
    )
    def check_code_versions() -> None:
        check_code_versions_op()

    return check_code_versions


def _latest_built_by(context: SensorEvaluationContext, table: str) -> str | None:
    event = context.instance.get_latest_materialization_event(AssetKey(table))
    if event is None or event.asset_materialization is None:
        return None
    value = event.asset_materialization.metadata.get(CODE_VERSION)
    return str(value.value) if value is not None else None


def code_version_sensor(pipeline: Pipeline, check_job: JobDefinition) -> SensorDefinition:
    @sensor(
        name="code_version_sensor",
        job=check_job,
        minimum_interval_seconds=settings().late_data_sensor_interval_s,
        default_status=DefaultSensorStatus.RUNNING,
        description="Launches check_code_versions when the code loaded is not the code last checked: the days older "
        "code built then fail built_by_current_code. A tick compares versions only: Spark starts in the run.",
    )
    def code_versions_changed(context: SensorEvaluationContext) -> RunRequest | SkipReason:
        versions = code_versions.current(pipeline)
        state = json.dumps(versions, sort_keys=True)
        if state == context.cursor:
            return SkipReason("the code loaded is the code last checked")
        if context.cursor is None:
            # First tick: nothing checked yet. A lake whose latest writes are by this code needs no check.
            older = [t for t in pipeline.publish_order if _latest_built_by(context, t) not in (None, versions[t])]
            if not older:
                context.update_cursor(state)
                return SkipReason("every table was last written by the code loaded now")
        context.update_cursor(state)
        return RunRequest(run_key=f"code:{state}", job_name=CODE_CHECK_JOB)

    return code_versions_changed


class PlanConfig(Config):
    """The days a plan looks at and the tables it starts from (every table built from them follows)."""

    start: str = Field(default="", description="first day, YYYY-MM-DD (default: the first partition)")
    end: str = Field(default="", description="last day, YYYY-MM-DD, inclusive (default: the last partition)")
    select: list[str] = Field(default_factory=list, description="tables to start from (default: every table)")


def plan_job(pipeline: Pipeline) -> JobDefinition:
    @op(name=PLAN_OP, out=Out(dict))
    def build_plan_op(context: OpExecutionContext, config: PlanConfig, pyspark: LazyPySparkResource) -> Iterator[Any]:
        """Rebuild the days older code built, beside the lake, and compare them day by day with what is published."""
        liveness.record(context, pipeline)
        partitions = pipeline.partitions
        start = date.fromisoformat(config.start) if config.start else partitions.first_day
        end = date.fromisoformat(config.end) if config.end else partitions.last_day
        unknown = [t for t in config.select if t not in pipeline.by_name]
        if unknown:
            raise recording.refusal(f"not tables of {pipeline.name}: {', '.join(unknown)}")
        plan = plans.make_plan(session_of(pyspark), pipeline, start, end, config.select or None)
        metadata = {table: MetadataValue.md(plan.markdown(table)) for table in plan.tables}
        note = MetadataValue.md(plans.version_note(plan).replace("\n", "  \n"))
        yield Output(
            plan.to_json(),
            metadata={"plan_id": plan.plan_id, "promotable": plan.promotable, "note": note, **metadata},
        )

    @job(
        name=PLAN_JOB,
        executor_def=in_process_executor,
        resource_defs={"pyspark": spark_resource(settings(), short_runs=True)},
        tags={PIPELINE_TAG: pipeline.name},
        description="Plan a code change: rebuild the days older code built beside the lake, compare day by day; "
        "publish nothing (see `plan`).",
    )
    def plan_code_change() -> None:
        build_plan_op()

    return plan_code_change


class PromoteConfig(Config):
    plan_id: str = Field(description="the plan to promote, as `plan` printed it")


def promote_job(pipeline: Pipeline) -> JobDefinition:
    @op(name=PROMOTE_OP, out=Out(dict), pool=LAKE_WRITES_POOL)
    def promote_op(context: OpExecutionContext, config: PromoteConfig, pyspark: LazyPySparkResource) -> Iterator[Any]:
        """Write exactly the plan's changed days from its shadow tables; record its unchanged days as current."""
        liveness.record(context, pipeline)
        spark = session_of(pyspark)
        try:
            promoted = promotion.promote(spark, pipeline, config.plan_id, RunInfo.of(context.run))
        except (plans.PlanRefused, Refused) as refused:
            raise recording.refusal(str(refused)) from None
        for table, publication in promoted.publications.items():
            yield from recording.publication_events(context, table, publication)
        current = code_versions.current(pipeline)
        for table, days in promoted.unchanged.items():
            unchanged = [checks.code.unchanged_by_plan(day, current[table], config.plan_id) for day in days]
            yield from checks.check_evaluations(context.instance, table, unchanged)
        yield Output({"plan_id": config.plan_id, "note": plans.version_note(promoted.plan)})

    @job(
        name=PROMOTE_JOB,
        executor_def=in_process_executor,
        resource_defs={"pyspark": spark_resource(settings(), short_runs=True)},
        tags={PIPELINE_TAG: pipeline.name},
        description="Promote a plan: exactly its changed days, one commit per table (see `promote`).",
    )
    def promote_plan() -> None:
        promote_op()

    return promote_plan
