"""A pipeline's daily-run schedule, evaluated at a given instant as the daemon's tick evaluates it."""

from datetime import datetime

from dagster import ScheduleDefinition, build_schedule_context

from exact_backfills.dagster_names import DAILY_RUN_SCHEDULE
from exact_backfills.declare import Pipeline
from exact_backfills.location import definitions_of


def daily_run(pipeline: Pipeline) -> ScheduleDefinition:
    return definitions_of(pipeline).get_schedule_def(DAILY_RUN_SCHEDULE)


def tick(pipeline: Pipeline, at: datetime):
    """The daily run's evaluation at `at` (its run requests, or why it skipped)."""
    repository = definitions_of(pipeline).get_repository_def()
    return daily_run(pipeline).evaluate_tick(
        build_schedule_context(scheduled_execution_time=at, repository_def=repository)
    )
