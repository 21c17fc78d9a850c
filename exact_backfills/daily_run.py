"""The daily run: a schedule that publishes each day of a pipeline once the day closes (its end in the pipeline's
timezone plus the calendar's `closes_after`), as one normal partition run of every table (the one write path, its
checks), ahead of any backfill's queued runs. The late-data sensor goes on restating the days before it; a day whose
rows land before it closes is published by that sensor already, and the daily run publishes it complete."""

from datetime import datetime

from dagster import (
    DefaultScheduleStatus,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)

from exact_backfills import clock
from exact_backfills.calendar import Calendar
from exact_backfills.dagster_names import (
    DAILY_RUN_PRIORITY,
    DAILY_RUN_SCHEDULE,
    DAILY_RUN_TAG,
    PIPELINE_TAG,
    PRIORITY_TAG,
)
from exact_backfills.dagster_private import UnresolvedAssetJobDefinition
from exact_backfills.declare import Pipeline


def cron_of(calendar: Calendar) -> str:
    """Every day at the minute days close, in the calendar's timezone (Dagster's schedules keep to it across
    daylight-saving changes)."""
    minutes = int(calendar.closes_after.total_seconds()) // 60
    return f"{minutes % 60} {minutes // 60} * * *"


def daily_run_schedule(pipeline: Pipeline, job: UnresolvedAssetJobDefinition) -> ScheduleDefinition:
    calendar = pipeline.calendar
    assert calendar is not None  # refused when declared without one

    @schedule(
        name=DAILY_RUN_SCHEDULE,
        job=job,
        cron_schedule=cron_of(calendar),
        execution_timezone=calendar.timezone,
        default_status=DefaultScheduleStatus.RUNNING,
        description=f"Publish each day of pipeline {pipeline.name} once it closes, {calendar.closes_after} after its "
        f"end in {calendar.timezone}.",
    )
    def daily_run(context: ScheduleEvaluationContext) -> RunRequest | SkipReason:
        return day_run_request(pipeline, context.scheduled_execution_time or clock.now())

    return daily_run


def day_run_request(pipeline: Pipeline, at: datetime) -> RunRequest | SkipReason:
    """At `at`, one run of every table for the day that closed last, keyed by the day (a tick evaluated twice
    requests it once), or why not."""
    assert pipeline.calendar is not None
    day, partitions = pipeline.calendar.last_closed_day(at), pipeline.calendar.in_effect(at)
    if day not in partitions:
        return SkipReason(f"{day} closed, outside the partitions {partitions.first_day}..{partitions.last_day}")
    tags = {PIPELINE_TAG: pipeline.name, DAILY_RUN_TAG: day.isoformat(), PRIORITY_TAG: DAILY_RUN_PRIORITY}
    return RunRequest(run_key=day.isoformat(), partition_key=day.isoformat(), tags=tags)
