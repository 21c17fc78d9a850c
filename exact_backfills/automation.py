"""Late-data restatement in Dagster, for a pipeline: its landing as observable assets (each landed day's data version),
a job that restates exactly the days new landing batches change (one run, one commit per table), a sensor that
launches it when a batch lands, and a preview job that observes the landing and shows the days a restatement would
rewrite as failing up_to_date_with_landing checks."""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetObservation,
    AssetSelection,
    DagsterInstance,
    DagsterRunStatus,
    DataVersion,
    DataVersionsByPartition,
    DefaultSensorStatus,
    JobDefinition,
    OpExecutionContext,
    Out,
    Output,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    SourceAsset,
    asset_check,
    define_asset_job,
    in_process_executor,
    job,
    observable_source_asset,
    op,
    sensor,
)
from dagster_pyspark import LazyPySparkResource
from pyspark.sql import SparkSession

from exact_backfills import checks, landing, landing_index, late_data, liveness, recording
from exact_backfills.assets import failed_publication
from exact_backfills.dagster_names import (
    ALL_ASSETS_JOB,
    LAKE_WRITES_POOL,
    LANDING_STATE_TAG,
    LEFT_STALE_TAG,
    PIPELINE_TAG,
    PREVIEW_JOB,
    PROCESS_TAG,
    PUBLISHED_NOTHING,
    PUBLISHED_TAG,
    REPAIR_OF_TAG,
    RESTATE_JOB,
    RESTATE_OP,
    implicit_asset_job_name,
)
from exact_backfills.dagster_private import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    DATA_VERSION_TAG,
    PARTITION_NAME_TAG,
    BulkActionStatus,
    UnresolvedAssetJobDefinition,
)
from exact_backfills.declare import Pipeline, Source, SourceKind, landing_asset
from exact_backfills.pipelines import command
from exact_backfills.publish import PartlyPublished, Refused, RunInfo
from resources.delta_io import is_delta_table
from resources.lake import table_path
from resources.settings import settings
from resources.spark import session_of, spark_resource


def landing_observations(
    spark: SparkSession, pipeline: Pipeline, detection: late_data.Detection
) -> list[AssetObservation]:
    """The new data version of each landing day the detected batches add rows to, read from the batches that can hold
    those days only."""
    landed = detection.landed_days(pipeline)
    return [
        AssetObservation(landing_asset(source), partition=day.isoformat(), tags={DATA_VERSION_TAG: version})
        for source in pipeline.sources
        if landed[source.name]
        for day, version in landing.day_versions(
            spark,
            source,
            pipeline.partitions,
            landed[source.name],
            landing_index.batches_holding(spark, pipeline, source, landed[source.name], index_new=False),
        ).items()
    ]


def stale_day_evaluations(
    instance: DagsterInstance, pipeline: Pipeline, detection: late_data.Detection
) -> list[AssetCheckEvaluation]:
    """Before anything is written: a failing up_to_date_with_landing result on each day of each table to restate
    (a passing one saying who held it and why on each day held since a rollback),
    and a failing late_data_outside_window result on each day too old to restate, each tied to the day's published
    materialization, so the check's Partitions view shows exactly those days as failed until they are rewritten."""
    evaluations = []
    for table, days in detection.days_by_table().items():
        outcomes = [checks.up_to_date.stale(day, detection.change(table, day), with_batches=True) for day in days]
        outcomes += [
            checks.late_data.outside_window(
                day,
                change,
                detection.window_start,
                f"backfill {day} by hand: {command(pipeline)} backfill --start {day} --end {day}",
            )
            for day, change in sorted(detection.outside.get(table, {}).items())
        ]
        # Held since a rollback: as the operator wants it, what landed for it left out until released.
        outcomes += [checks.up_to_date.held(h.day, h.describe()) for h in detection.holds]
        evaluations += checks.check_evaluations(instance, table, outcomes)
    return evaluations


def _observed(spark: SparkSession, pipeline: Pipeline, source: Source) -> DataVersionsByPartition:
    versions = landing.day_versions(spark, source, pipeline.partitions)
    return DataVersionsByPartition({d.isoformat(): DataVersion(v) for d, v in versions.items()})


def _landing_asset(pipeline: Pipeline, source: Source, detects: bool) -> SourceAsset:
    """A source's landing as Dagster sees it: observable, daily-partitioned (by each row's day, or the day a dimension's
    version takes effect). Observing records every landed day's data version; observing the pipeline's first source
    (`detects`) also records the days each table must restate for the batches landed since the last restatement."""
    by = f"the day its versions take effect ({source.day})" if source.kind is SourceKind.DIMENSION else source.day
    description = (
        f"{source.description + ' ' if source.description else ''}Batches of {source.name} "
        f"($LAKE_ROOT/landing/{source.name}/ingest_date=D/), partitioned by {by}. Observing it records each landed "
        "day's data version (its batches and their rows)"
        + (
            ", and fails up_to_date_with_landing on the days of each table that batches landed since the last "
            "restatement make stale."
            if detects
            else "."
        )
    )

    @observable_source_asset(
        name=landing_asset(source),
        partitions_def=pipeline.partitions.definition,
        group_name="landing",
        description=description,
    )
    def observe(context: OpExecutionContext, pyspark: LazyPySparkResource) -> DataVersionsByPartition:
        liveness.record(context, pipeline)
        spark = session_of(pyspark)
        if detects:
            try:
                detection = late_data.detect(spark, pipeline)
            except late_data.NothingPublished:
                detection = None  # nothing is stale
            if detection:
                for evaluation in stale_day_evaluations(context.instance, pipeline, detection):
                    # An op's context logs a check evaluation of any asset at runtime, though its annotation lists
                    # fewer kinds.
                    context.log_event(evaluation)  # type: ignore[arg-type]
        return _observed(spark, pipeline, source)

    return observe


LANDING_CONTRACT = "landing_contract"


def _landing_contract_check(pipeline: Pipeline, source: Source) -> AssetChecksDefinition:
    kept = (
        f"each is kept in {pipeline.staging[source.name].quarantine} as one row"
        if source.kind is SourceKind.EVENTS
        else "a dimension's is not kept"
    )

    @asset_check(
        asset=landing_asset(source),
        name=LANDING_CONTRACT,
        description=(
            "Every landed file meets the landing contract (columns and their types, a batch folder named by its date). "
            f"A refused file is not read ({kept}). Fails while any is landed; take one out with "
            f"`{command(pipeline)} withdraw`."
        ),
    )
    def check() -> AssetCheckResult:
        return checks.landing_contract_result([r.describe() for r in landing.refused_files(source)])

    return check


def landing_assets(pipeline: Pipeline) -> list[SourceAsset]:
    return [_landing_asset(pipeline, s, detects=i == 0) for i, s in enumerate(pipeline.sources)]


def landing_checks(pipeline: Pipeline) -> list[AssetChecksDefinition]:
    return [_landing_contract_check(pipeline, s) for s in pipeline.sources]


@dataclass(frozen=True)
class RestatementSummary:
    """What a restatement did: the days it restated per table, the days of late rows older than its window (recorded
    as exceptions, not restated) per table, the landed files refused, and the watermark it advanced to."""

    days_by_table: dict[str, list[date]]
    outside_window: dict[str, list[date]]
    refused_files: list[str]  # each as the landing contract describes it
    watermark: datetime | None

    @classmethod
    def of(cls, detection: late_data.Detection) -> "RestatementSummary":
        return cls(
            {table: list(days) for table, days in detection.days_by_table().items() if days},
            {table: sorted(days) for table, days in detection.outside.items() if days},
            [r.describe() for r in detection.refused],
            detection.new_watermark_ts,
        )

    def describe(self) -> str:
        """The summary as one line for the run's log (and a terminal showing it)."""
        days = self.days_by_table
        restated = "; ".join(f"{t} {len(d)} day(s)" for t, d in days.items()) if days else "nothing to restate"
        outside = sum(len(d) for d in self.outside_window.values())
        return (
            f"restated: {restated}"
            + (f"; {outside} day(s) older than the restatement window recorded as exceptions" if outside else "")
            + (f"; {len(self.refused_files)} landed file(s) refused" if self.refused_files else "")
            + f"; watermark {self.watermark.isoformat() if self.watermark else '-'}"
        )


def restate_job(pipeline: Pipeline) -> JobDefinition:
    @op(name=RESTATE_OP, out=Out(RestatementSummary), pool=LAKE_WRITES_POOL)
    def restate_late_data_op(context: OpExecutionContext, pyspark: LazyPySparkResource) -> Iterator[Any]:
        """Restate the days changed by batches landed since the watermark, in every table, then advance the
        watermark. Dagster records each stage as it happens: the stale days (failing checks) before anything is
        written, then every table's days and check results once all are committed."""
        liveness.record(context, pipeline)
        spark = session_of(pyspark)
        detection = late_data.detect(spark, pipeline, keep_landed=True)
        try:
            for refused in detection.refused:
                context.log.warning(
                    f"refused by the landing contract, not read: {refused.describe()} (an events source's files are "
                    f"kept in quarantine; `{command(pipeline)} withdraw` takes a file out of the landing)"
                )
            yield from landing_observations(spark, pipeline, detection)
            yield from stale_day_evaluations(context.instance, pipeline, detection)
            try:
                restated = late_data.apply_restatement(
                    spark, pipeline, late_data.plan_restatement(detection), RunInfo.of(context.run)
                )
            except (Refused, PartlyPublished) as error:
                yield from failed_publication(context, pipeline, error)
            for table, publication in restated.publications.items():
                yield from recording.publication_events(context, table, publication)
        finally:
            detection.unpersist()
        summary = RestatementSummary.of(detection)
        context.log.info(summary.describe())
        yield Output(summary)

    # A restatement rewrites a few days: its run is short, and its JVM is set for that (resources.spark).
    @job(
        name=RESTATE_JOB,
        executor_def=in_process_executor,
        resource_defs={"pyspark": spark_resource(settings(), short_runs=True)},
        tags={PIPELINE_TAG: pipeline.name},
        description="Restate exactly the days the batches landed since the last restatement change, in every table.",
    )
    def restate_late_data() -> None:
        restate_late_data_op()

    return restate_late_data


def preview_job(pipeline: Pipeline) -> UnresolvedAssetJobDefinition:
    """Observing the landing is the preview: what a restatement would rewrite, and why, recorded in Dagster; no
    writes."""
    return define_asset_job(
        PREVIEW_JOB,
        selection=AssetSelection.assets(*pipeline.landing_assets),
        tags={PIPELINE_TAG: pipeline.name},
    )


def landing_state(pipeline: Pipeline) -> str:
    """Which batches have landed: changes when any batch folder appears (even one dated in the past)."""
    parts = []
    for source in pipeline.sources:
        names = [landing.batch_name(p) for p in landing.batch_dirs(source)]
        parts.append(f"{source.name}:{len(names)}:{max(names, default='-')}")
    return "|".join(parts)


def left_stale_state(instance: DagsterInstance, pipeline: Pipeline) -> str:
    """The newest run that left days stale outside its own (they are pending in the watermark): a new one makes the
    sensor restate, as a new batch does."""
    runs = instance.get_run_ids(RunsFilter(tags={LEFT_STALE_TAG: "true", PIPELINE_TAG: pipeline.name}), limit=1)
    return f"|left_stale:{runs[0]}" if runs else ""


_RANGE_TAGS = (ASSET_PARTITION_RANGE_START_TAG, ASSET_PARTITION_RANGE_END_TAG, PARTITION_NAME_TAG)
# The jobs whose runs write the lake: the machinery's, and (implicit_asset_job_name) the one Dagster runs the UI's
# backfills and materializations as.
_WRITING_JOBS = (ALL_ASSETS_JOB, RESTATE_JOB)


def run_to_repair(instance: DagsterInstance, pipeline: Pipeline) -> RunRequest | None:
    """A run of the pipeline that failed after writing part of its days, or died, is run again, once, over the same
    days: writes replace whole days, so the repair publishes every table of those days exactly once. A run that failed
    having published nothing (a blocking check, a refused batch) is not: running it again would fail the same way."""
    for record in instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.FAILURE]), limit=20):
        failed = record.dagster_run
        tags = failed.tags
        if (
            failed.job_name not in (*_WRITING_JOBS, implicit_asset_job_name())
            or tags.get(PIPELINE_TAG) != pipeline.name
            or tags.get(PUBLISHED_TAG) == PUBLISHED_NOTHING
            or REPAIR_OF_TAG in tags
            or PROCESS_TAG not in tags  # its step never started: it wrote nothing
            # An asset job's run with no asset selected ran checks only (the UI's "Execute", `check`): it wrote
            # nothing. (A restatement's run has no asset selection either: it is an op job.)
            or (failed.job_name != RESTATE_JOB and failed.asset_selection == frozenset())
        ):
            continue
        same_days = {k: v for k, v in tags.items() if k in _RANGE_TAGS}
        if instance.get_runs_count(RunsFilter(tags={REPAIR_OF_TAG: failed.run_id})):
            continue
        later = instance.get_runs(
            RunsFilter(
                job_name=failed.job_name,
                statuses=[DagsterRunStatus.SUCCESS],
                tags=same_days,
                created_after=record.create_timestamp,
            ),
            limit=1,
        )
        if later:
            continue
        repair_tags = {REPAIR_OF_TAG: failed.run_id, **same_days}
        if failed.job_name == RESTATE_JOB:  # its days are pending in the watermark: a restatement rewrites them
            return RunRequest(
                run_key=f"repair:{failed.run_id}",
                job_name=RESTATE_JOB,
                tags={**repair_tags, LANDING_STATE_TAG: landing_state(pipeline)},
            )
        return RunRequest(
            run_key=f"repair:{failed.run_id}",
            job_name=ALL_ASSETS_JOB,
            tags=repair_tags,
            asset_selection=list(failed.asset_selection) if failed.asset_selection else None,
        )
    return None


def _backfill_running(instance: DagsterInstance, pipeline: Pipeline) -> bool:
    """Whether a Dagster backfill of the pipeline's tables is under way."""
    tables = set(pipeline.every_table)
    for backfill in instance.get_backfills(status=BulkActionStatus.REQUESTED, limit=20):
        selected = {k.to_user_string() for k in backfill.asset_selection or ()}
        if not selected or selected & tables:
            return True
    return False


def late_data_sensor(
    pipeline: Pipeline, restate: JobDefinition, all_assets: UnresolvedAssetJobDefinition
) -> SensorDefinition:
    staging = [t.name for t in pipeline.staging.values()]

    @sensor(
        name="late_data_sensor",
        jobs=[restate, all_assets],
        minimum_interval_seconds=settings().late_data_sensor_interval_s,
        default_status=DefaultSensorStatus.RUNNING,
        description="Launches restate_late_data when a landing batch arrives. Listing the landing folders is all a "
        "tick costs: Spark starts only in the run.",
    )
    def late_data(context: SensorEvaluationContext) -> RunRequest | SkipReason | None:
        # A command-line run whose process died (or a run whose code server died with it) stays STARTED for Dagster:
        # closed here, it no longer holds late data back.
        closed, active = liveness.close_dead_runs(context.instance, pipeline)
        for dead in closed:
            context.log.warning(f"closed a dead run: {dead.describe()}")
        unbuilt = [t for t in staging if not is_delta_table(table_path(t))]
        if unbuilt:
            return SkipReason(f"{', '.join(unbuilt)} not built yet: backfill first")
        if _backfill_running(context.instance, pipeline):
            return SkipReason("a backfill is running: late batches are restated after it")
        if active:
            return SkipReason(
                f"waiting for {active[0].describe()}: late batches are restated after it (one writer per day at a time)"
            )
        repair = run_to_repair(context.instance, pipeline)
        if repair:
            context.log.warning(f"running again the days of failed run {repair.tags[REPAIR_OF_TAG]}")
            return repair
        state = landing_state(pipeline) + left_stale_state(context.instance, pipeline)
        if state == context.cursor:
            return SkipReason("no new landing batch")
        context.update_cursor(state)
        if context.instance.get_runs_count(
            RunsFilter(
                job_name=RESTATE_JOB,
                statuses=[DagsterRunStatus.SUCCESS],
                tags={LANDING_STATE_TAG: state, PIPELINE_TAG: pipeline.name},
            )
        ):
            return SkipReason("this landing state was restated already (e.g. by the `restate` command)")
        # The run key makes a replayed tick for the same landing state launch nothing.
        return RunRequest(run_key=state, job_name=RESTATE_JOB, tags={LANDING_STATE_TAG: state})

    return late_data
