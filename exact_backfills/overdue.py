"""The days that missed their deadline without being published, shown day by day as they happen: a sensor (no Spark)
that, once a day's deadline has passed, records a failing `published_by_deadline` on each table that has not
published the day ("not published yet", how late). The run that publishes the day later records its own result,
late by how much and why, which Dagster shows in its place."""

from datetime import UTC, date, datetime, timedelta

from dagster import DefaultSensorStatus, SensorDefinition, SensorEvaluationContext, SkipReason, sensor

from exact_backfills import checks, clock
from exact_backfills.calendar import Calendar
from exact_backfills.declare import Pipeline

OVERDUE_SENSOR = "deadline_sensor"
# How many days back a tick looks: a day overdue longer has been reported already (or the sensor was off).
LOOKBACK_DAYS = 7


def overdue_days(calendar: Calendar, first_day: date, at: datetime, after: date | None) -> list[date]:
    """The days whose deadline has passed at `at`, after `after` (the last day reported), within the last week."""
    newest = calendar.last_closed_day(at)
    days = [newest - timedelta(days=n) for n in range(LOOKBACK_DAYS)]
    return sorted(d for d in days if d >= first_day and (after is None or d > after) and _passed(calendar, d, at))


def _passed(calendar: Calendar, day: date, at: datetime) -> bool:
    deadline = calendar.deadline(day)
    return deadline is not None and deadline < at


def _instant(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)


def overdue_sensor(pipeline: Pipeline) -> SensorDefinition:
    calendar = pipeline.calendar
    assert calendar is not None and calendar.publish_by is not None

    @sensor(
        name=OVERDUE_SENSOR,
        minimum_interval_seconds=60,
        default_status=DefaultSensorStatus.RUNNING,
        description=f"Fails published_by_deadline on each day of pipeline {pipeline.name} not published by its "
        f"deadline ({calendar.publish_by} after the day's end in {calendar.timezone}), as the deadline passes.",
    )
    def deadlines(context: SensorEvaluationContext) -> SkipReason:
        at = clock.now()
        after = date.fromisoformat(context.cursor) if context.cursor else None
        days = [d for d in overdue_days(calendar, pipeline.partitions.first_day, at, after) if d in pipeline.partitions]
        if not days:
            return SkipReason("no deadline passed since the last tick")
        missed = 0
        for table in pipeline.publish_order:
            latest = checks.latest_materializations(context.instance, table, days).items()
            # A day written only while it was in the making (a window's restatement) is not published
            published = {d for d, m in latest if calendar.publishes(date.fromisoformat(d), _instant(m.timestamp))}
            outcomes = [
                checks.deadline.outcome(d, calendar.deadline(d) or at, None, None, at)
                for d in days
                if d.isoformat() not in published
            ]
            for evaluation in checks.check_evaluations(context.instance, table, outcomes):
                context.instance.report_runless_asset_event(evaluation)
            missed += len(outcomes)
        context.update_cursor(days[-1].isoformat())
        return SkipReason(f"{days[0]}..{days[-1]}: deadline passed; {missed} table-day(s) not published, shown failing")

    return deadlines
