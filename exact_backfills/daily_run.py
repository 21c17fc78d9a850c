"""The daily run: a schedule that publishes each day of a pipeline once the day closes (its end in the pipeline's
timezone plus the calendar's `closes_after`), as one normal partition run of every table (the one write path, its
checks), ahead of any backfill's queued runs. The late-data sensor goes on restating the days before it; a day whose
rows land before it closes is published by that sensor already, and the daily run publishes it complete. A tick also
requests the days of the week before that no table or not every table has published (the daemon was down at their
tick): nothing is left unpublished because a tick was missed."""

from datetime import date, datetime, timedelta

from dagster import (
    DagsterInstance,
    DefaultScheduleStatus,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)

from exact_backfills import checks, clock
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
    def daily_run(context: ScheduleEvaluationContext) -> list[RunRequest] | SkipReason:
        # The daemon's context has its instance; one built in a test without an instance has none to look in.
        instance = context.instance if context.instance_ref is not None else None
        return day_run_requests(pipeline, instance, context.scheduled_execution_time or clock.now())

    return daily_run


# How many days before the one that closed a tick looks for days a missed tick left unpublished.
CATCH_UP_DAYS = 7


def day_run_requests(
    pipeline: Pipeline, instance: DagsterInstance | None, at: datetime
) -> list[RunRequest] | SkipReason:
    """At `at`, one run of every table for the day that closed last, and one for each day of the week before not
    published by every table in `instance`, each keyed by its day (Dagster requests a key once per schedule), or why
    not."""
    assert pipeline.calendar is not None
    day, partitions = pipeline.calendar.last_closed_day(at), pipeline.calendar.in_effect(at)
    if day not in partitions:
        return SkipReason(f"{day} closed, outside the partitions {partitions.first_day}..{partitions.last_day}")
    earlier = [d for d in (day - timedelta(days=n) for n in range(CATCH_UP_DAYS, 0, -1)) if d in partitions]
    missed = _unpublished(instance, pipeline, earlier) if instance is not None else []
    return [_request(pipeline, d) for d in [*missed, day]]


def _unpublished(instance: DagsterInstance, pipeline: Pipeline, days: list[date]) -> list[date]:
    """The days of `days` some table of the pipeline has no materialization of."""
    missing: set[date] = set()
    for table in pipeline.publish_order:
        published = checks.latest_materializations(instance, table, days)
        missing |= {d for d in days if d.isoformat() not in published}
    return sorted(missing)


def _request(pipeline: Pipeline, day: date) -> RunRequest:
    tags = {PIPELINE_TAG: pipeline.name, DAILY_RUN_TAG: day.isoformat(), PRIORITY_TAG: DAILY_RUN_PRIORITY}
    return RunRequest(run_key=day.isoformat(), partition_key=day.isoformat(), tags=tags)
