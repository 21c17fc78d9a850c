"""Late-data restatement in Dagster: a job that restates exactly the days new landing batches change (one run, one
commit per table), a sensor that launches it when a batch lands, and a preview job that observes the landing (every
landed day's data version) and shows the days a restatement would rewrite as failing up_to_date_with_landing checks."""

import os
from collections.abc import Iterator
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetObservation,
    AssetSelection,
    DagsterInstance,
    DagsterRunStatus,
    DataVersion,
    DataVersionsByPartition,
    DefaultSensorStatus,
    OpExecutionContext,
    Out,
    Output,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SkipReason,
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

from assets_pkg.tables import BY_NAME, LANDING_DATASETS, LANDING_ORDER_ITEMS, LANDING_PRODUCTS
from exact_backfills import checks, landing, landing_index, late_data, liveness, recording
from exact_backfills.assets import all_assets_job, failed_publication
from exact_backfills.dagster_names import (
    ALL_ASSETS_JOB,
    LAKE_WRITES_POOL,
    LANDING_STATE_TAG,
    PREVIEW_JOB,
    PROCESS_TAG,
    PUBLISHED_NOTHING,
    PUBLISHED_TAG,
    REPAIR_OF_TAG,
    RESTATE_JOB,
    RESTATE_OP,
)
from exact_backfills.dagster_private import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    DATA_VERSION_TAG,
    IMPLICIT_ASSET_JOB_NAME,
    PARTITION_NAME_TAG,
    BulkActionStatus,
)
from exact_backfills.partitions import daily_partitions
from exact_backfills.publish import PartlyPublished, Refused, RunInfo
from resources.lake import table_path
from resources.settings import settings
from resources.spark import session_of, spark_resource


def landing_observations(spark: SparkSession, detection: late_data.Detection) -> list[AssetObservation]:
    """The new data version of each landing day the detected batches add rows to, read from the batches that can hold
    those days only."""
    landed = detection.landed_days()
    return [
        AssetObservation(asset, partition=day.isoformat(), tags={DATA_VERSION_TAG: version})
        for asset, dataset in LANDING_DATASETS.items()
        if landed[dataset]
        for day, version in landing.day_versions(
            spark,
            dataset,
            landed[dataset],
            landing_index.batches_holding(spark, dataset, landed[dataset], index_new=False),
        ).items()
    ]


def stale_day_evaluations(instance: DagsterInstance, detection: late_data.Detection) -> list[AssetCheckEvaluation]:
    """Before anything is written: a failing up_to_date_with_landing result on each day of each table to restate
    (a passing one saying who held it and why on each day held since a rollback),
    and a failing late_data_outside_window result on each day too old to restate, each tied to the day's published
    materialization, so the check's Partitions view shows exactly those days as failed until they are rewritten."""
    evaluations = []
    for table, days in detection.days_by_table().items():
        outcomes = []
        for day in days:
            change = detection.change(table, day)
            outcomes.append(
                checks.Outcome(
                    checks.UP_TO_DATE,
                    day,
                    False,
                    {"stale": True, "why": change.describe(), "batches": ", ".join(sorted(change.batches))},
                )
            )
        if BY_NAME[table].checks.late_data:
            outcomes += [
                checks.Outcome(
                    checks.LATE_DATA,
                    day,
                    False,
                    {
                        "why": change.describe(),
                        "window_start": str(detection.window_start),
                        "action": f"backfill {day} by hand: python -m assets_pkg backfill --start {day} --end {day}",
                    },
                )
                for day, change in sorted(detection.outside.items())
            ]
        # Held since a rollback: as the operator wants it, what landed for it left out until released.
        outcomes += [
            checks.Outcome(checks.UP_TO_DATE, h.day, True, {"stale": False, "held": True, "why": h.describe()})
            for h in detection.holds
        ]
        evaluations += recording.check_evaluations(instance, table, outcomes)
    return evaluations


def _observed(spark: SparkSession, asset: str) -> DataVersionsByPartition:
    versions = landing.day_versions(spark, LANDING_DATASETS[asset])
    return DataVersionsByPartition({d.isoformat(): DataVersion(v) for d, v in versions.items()})


# The landing as Dagster sees it: observable, daily-partitioned (by order day / the day a product version takes
# effect). Observing records every landed day's data version; a restatement records the days its batches change.
@observable_source_asset(
    name=LANDING_ORDER_ITEMS,
    partitions_def=daily_partitions,
    group_name="landing",
    description="Order item batches ($LAKE_ROOT/landing/order_items/ingest_date=D/), partitioned "
    "by order_date. Observing it records each landed day's data version (its batches and their "
    "rows), and fails up_to_date_with_landing on the days of each table that batches landed since "
    "the last restatement make stale.",
)
def landing_order_items(context: OpExecutionContext, pyspark: LazyPySparkResource) -> DataVersionsByPartition:
    liveness.record(context)
    spark = session_of(pyspark)
    try:
        detection = late_data.detect(spark)
    except late_data.NothingPublished:
        detection = None  # nothing is stale
    if detection:
        for evaluation in stale_day_evaluations(context.instance, detection):
            # An op's context logs a check evaluation of any asset at runtime, though its annotation lists fewer kinds.
            context.log_event(evaluation)  # type: ignore[arg-type]
    return _observed(spark, LANDING_ORDER_ITEMS)


@observable_source_asset(
    name=LANDING_PRODUCTS,
    partitions_def=daily_partitions,
    group_name="landing",
    description="Product batches ($LAKE_ROOT/landing/products/ingest_date=D/), partitioned by the "
    "day a version takes effect. Observing it records each landed day's data version.",
)
def landing_products(context: OpExecutionContext, pyspark: LazyPySparkResource) -> DataVersionsByPartition:
    liveness.record(context)
    return _observed(session_of(pyspark), LANDING_PRODUCTS)


LANDING_CONTRACT = "landing_contract"


def _landing_contract_check(asset: str) -> AssetChecksDefinition:
    dataset = LANDING_DATASETS[asset]

    @asset_check(
        asset=asset,
        name=LANDING_CONTRACT,
        description=(
            "Every landed file meets the landing contract (columns and their types, a batch folder named by its date). "
            "A refused file is not read: order item files are kept in quarantine as one row each. Fails while any is "
            "landed; take one out with `python -m assets_pkg withdraw`."
        ),
    )
    def check() -> AssetCheckResult:
        refused = landing.refused_files(dataset)
        return AssetCheckResult(
            passed=not refused,
            severity=AssetCheckSeverity.ERROR,
            description=f"{len(refused)} file(s) refused" if refused else "every landed file meets the contract",
            metadata={
                "refused_files": len(refused),
                "refused": "\n".join(f"{dataset}/{r.describe()}" for r in refused[:50]),
            },
        )

    return check


landing_assets = [landing_order_items, landing_products]
landing_checks = [_landing_contract_check(asset) for asset in LANDING_DATASETS]


def _summary(detection: late_data.Detection) -> dict[str, Any]:
    return {
        "days_by_table": {
            table: [d.isoformat() for d in days] for table, days in detection.days_by_table().items() if days
        },
        "outside_window": [d.isoformat() for d in sorted(detection.outside)],
        "refused_files": [r.describe() for r in detection.refused],
        "watermark": detection.new_watermark_ts.isoformat() if detection.new_watermark_ts else None,
    }


@op(name=RESTATE_OP, out=Out(dict), pool=LAKE_WRITES_POOL)
def restate_late_data_op(context: OpExecutionContext, pyspark: LazyPySparkResource) -> Iterator[Any]:
    """Restate the days changed by batches landed since the watermark, in every table, then advance the watermark.
    Dagster records each stage as it happens: the stale days (failing checks) before anything is written, then every
    table's days and check results once all are committed."""
    liveness.record(context)
    spark = session_of(pyspark)
    detection = late_data.detect(spark, keep_landed=True)
    try:
        for refused in detection.refused:
            context.log.warning(
                f"refused by the landing contract, not read: {refused.describe()} (order item "
                "files are kept in quarantine; `withdraw` takes a file out of the landing)"
            )
        yield from landing_observations(spark, detection)
        yield from stale_day_evaluations(context.instance, detection)
        try:
            restated = late_data.apply_restatement(
                spark, late_data.plan_restatement(detection), RunInfo.of(context.run)
            )
        except (Refused, PartlyPublished) as error:
            yield from failed_publication(context, error)
        for table, publication in restated.publications.items():
            yield from recording.publication_events(context, table, publication)
    finally:
        detection.unpersist()
    summary = _summary(detection)
    context.log.info(f"restated: {summary}")
    yield Output(summary)


# A restatement rewrites a few days: its run is short, and its JVM is set for that (resources.spark).
@job(
    name=RESTATE_JOB,
    executor_def=in_process_executor,
    resource_defs={"pyspark": spark_resource(settings(), short_runs=True)},
)
def restate_late_data_job() -> None:
    restate_late_data_op()


# Observing the landing is the preview: what a restatement would rewrite, and why, recorded in Dagster; no writes.
preview_late_data_job = define_asset_job(
    PREVIEW_JOB, selection=AssetSelection.assets(LANDING_ORDER_ITEMS, LANDING_PRODUCTS)
)


def landing_state() -> str:
    """Which batches have landed: changes when any batch folder appears (even one dated in the past)."""
    parts = []
    for dataset in (landing.ORDER_ITEMS, landing.PRODUCTS):
        names = [landing.batch_name(p) for p in landing.batch_dirs(dataset)]
        parts.append(f"{dataset}:{len(names)}:{max(names, default='-')}")
    return "|".join(parts)


_RANGE_TAGS = (ASSET_PARTITION_RANGE_START_TAG, ASSET_PARTITION_RANGE_END_TAG, PARTITION_NAME_TAG)
# The jobs whose runs write the lake: this project's, and the one Dagster runs the UI's backfills and materializations
# as.
_WRITING_JOBS = (ALL_ASSETS_JOB, RESTATE_JOB, IMPLICIT_ASSET_JOB_NAME)


def run_to_repair(instance: DagsterInstance) -> RunRequest | None:
    """A run that failed after writing part of its days, or died, is run again, once, over the same days: writes
    replace whole days, so the repair publishes every table of those days exactly once. A run that failed having
    published nothing (a blocking check, a refused batch) is not: running it again would fail the same way."""
    for record in instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.FAILURE]), limit=20):
        failed = record.dagster_run
        tags = failed.tags
        if (
            failed.job_name not in _WRITING_JOBS
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
                tags={**repair_tags, LANDING_STATE_TAG: landing_state()},
            )
        return RunRequest(
            run_key=f"repair:{failed.run_id}",
            job_name=ALL_ASSETS_JOB,
            tags=repair_tags,
            asset_selection=list(failed.asset_selection) if failed.asset_selection else None,
        )
    return None


@sensor(
    jobs=[restate_late_data_job, all_assets_job],
    minimum_interval_seconds=settings().late_data_sensor_interval_s,
    default_status=DefaultSensorStatus.RUNNING,
    description="Launches restate_late_data when a landing batch arrives. Listing the landing folders is all a tick "
    "costs: Spark starts only in the run.",
)
def late_data_sensor(context: SensorEvaluationContext) -> RunRequest | SkipReason | None:
    # A command-line run whose process died (or a run whose code server died with it) stays STARTED for Dagster:
    # closed here, it no longer holds late data back.
    closed, active = liveness.close_dead_runs(context.instance)
    for dead in closed:
        context.log.warning(f"closed a dead run: {dead.describe()}")
    if not os.path.isdir(os.path.join(table_path(late_data.STAGING.name), "_delta_log")):
        return SkipReason(f"{late_data.STAGING.name} is not built yet: backfill it first")
    if context.instance.get_backfills(status=BulkActionStatus.REQUESTED, limit=1):
        return SkipReason("a backfill is running: late batches are restated after it")
    if active:
        return SkipReason(
            f"waiting for {active[0].describe()}: late batches are restated after it (one writer per day at a time)"
        )
    repair = run_to_repair(context.instance)
    if repair:
        context.log.warning(f"running again the days of failed run {repair.tags[REPAIR_OF_TAG]}")
        return repair
    state = landing_state()
    if state == context.cursor:
        return SkipReason("no new landing batch")
    context.update_cursor(state)
    if context.instance.get_runs_count(
        RunsFilter(job_name=RESTATE_JOB, statuses=[DagsterRunStatus.SUCCESS], tags={LANDING_STATE_TAG: state})
    ):
        return SkipReason("this landing state was restated already (e.g. by the `restate` command)")
    # The run key makes a replayed tick for the same landing state launch nothing.
    return RunRequest(run_key=state, job_name=RESTATE_JOB, tags={LANDING_STATE_TAG: state})
