"""Late-data restatement in Dagster: a job that restates exactly the days new landing batches change (one run, one
commit per table), and a sensor that launches it when a batch lands."""

import os

from dagster import (
    AssetCheckEvaluation,
    AssetCheckSeverity,
    AssetKey,
    DefaultSensorStatus,
    OpExecutionContext,
    RunRequest,
    SensorEvaluationContext,
    SkipReason,
    in_process_executor,
    job,
    op,
    sensor,
)
from dagster._core.execution.backfill import BulkActionStatus  # not exported; the sensor only reads it
from dagster_pyspark import LazyPySparkResource

from assets_pkg import checks, landing, late_data
from assets_pkg.assets import STG_ORDER_ITEMS, RunInfo, log_publication
from resources.lake import table_path

RESTATE_JOB = "restate_late_data"
RESTATE_OP = "restate_stale_days"


@op(name=RESTATE_OP)
def restate_late_data_op(context: OpExecutionContext, pyspark: LazyPySparkResource) -> dict:
    """Restate the days changed by batches landed since the watermark, in every table, then advance the watermark."""
    result = late_data.restate(
        pyspark.spark_session,
        RunInfo(context.run.run_id, context.run.tags.get("dagster/backfill")),
        on_publication=lambda table, publication: log_publication(context, table, publication, selected=set()),
    )
    found = result.detection
    for day, change in sorted(found.outside.items()):
        context.log_event(
            AssetCheckEvaluation(
                asset_key=AssetKey(STG_ORDER_ITEMS),
                check_name=checks.LATE_DATA,
                passed=False,
                partition=day.isoformat(),
                severity=AssetCheckSeverity.ERROR,
                metadata={"why": change.describe(), "window_start": str(found.window_start),
                          "action": f"backfill {day} by hand: python -m assets_pkg backfill --start {day} --end {day}"},
            )
        )
    summary = {
        "restated": {table: [d.isoformat() for d in days] for table, days in found.days_by_table().items() if days},
        "outside_window": [d.isoformat() for d in sorted(found.outside)],
        "watermark": found.new_watermark_ts.isoformat() if found.new_watermark_ts else None,
    }
    context.log.info(f"restatement: {summary}")
    return summary


@job(name=RESTATE_JOB, executor_def=in_process_executor)
def restate_late_data_job():
    restate_late_data_op()


def landing_state() -> str:
    """Which batches have landed: changes when any batch folder appears (even one dated in the past)."""
    parts = []
    for dataset in (landing.ORDER_ITEMS, landing.PRODUCTS):
        names = [landing.batch_name(p) for p in landing.batch_dirs(dataset)]
        parts.append(f"{dataset}:{len(names)}:{max(names, default='-')}")
    return "|".join(parts)


@sensor(
    job=restate_late_data_job,
    minimum_interval_seconds=int(os.environ.get("LATE_DATA_SENSOR_INTERVAL_S", "30")),
    default_status=DefaultSensorStatus.RUNNING,
    description="Launches restate_late_data when a landing batch arrives. Listing the landing folders is all a tick "
    "costs: Spark starts only in the run.",
)
def late_data_sensor(context: SensorEvaluationContext):
    if not os.path.isdir(os.path.join(table_path(STG_ORDER_ITEMS), "_delta_log")):
        return SkipReason("stg_order_items is not built yet: backfill it first")
    if context.instance.get_backfills(status=BulkActionStatus.REQUESTED, limit=1):
        return SkipReason("a backfill is running: late batches are restated after it")
    state = landing_state()
    if state == context.cursor:
        return SkipReason("no new landing batch")
    context.update_cursor(state)
    # The run key makes a replayed tick for the same landing state launch nothing.
    return RunRequest(run_key=state, tags={"exact_backfills/landing_state": state})
