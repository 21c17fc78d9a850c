"""The one place that knows the partitions: daily, by event date, over PARTITION_START_DATE..PARTITION_END_DATE."""

from datetime import date, timedelta

from dagster import AssetExecutionContext, BackfillPolicy, DailyPartitionsDefinition

from resources.settings import settings


def first_day() -> date:
    return settings().first_day


def last_day() -> date:
    return settings().last_day


def max_partitions_per_run() -> int:
    return settings().backfill_max_partitions_per_run


def days(start: date, end: date) -> list[date]:
    return [start + timedelta(days=i) for i in range((end - start).days + 1)]


def chunks(start: date, end: date, size: int | None = None) -> list[tuple[date, date]]:
    """Consecutive ranges of at most `size` days covering start..end, as a backfill runs them."""
    size = size or max_partitions_per_run()
    all_days = days(start, end)
    return [(c[0], c[-1]) for c in (all_days[i : i + size] for i in range(0, len(all_days), size))]


daily_partitions = DailyPartitionsDefinition(
    start_date=first_day().isoformat(),
    end_date=(last_day() + timedelta(days=1)).isoformat(),  # Dagster's end is exclusive
)

# A range backfill runs as a few runs of up to N days each, never one run per day.
backfill_policy = BackfillPolicy.multi_run(max_partitions_per_run=max_partitions_per_run())


def run_days(context: AssetExecutionContext) -> list[date]:
    """The days a run materializes: one partition or a range."""
    window = context.partition_time_window
    return days(window.start.date(), (window.end - timedelta(days=1)).date())
