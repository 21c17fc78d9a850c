"""Each day's deadline, checked against when each table first published the day (its earliest row in the audit
trail from the day's end on): at the write that publishes it, and by `check` on what is published."""

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from exact_backfills import checks, clock
from exact_backfills.declare import Pipeline
from resources import audit


def declared(pipeline: Pipeline) -> bool:
    return pipeline.calendar is not None and pipeline.calendar.publish_by is not None


@dataclass(frozen=True)
class FirstPublished:
    """When a table first published each of some days, and its first day of all (None: it has published none)."""

    days: dict[date, datetime]
    table: datetime | None


def first_published(spark: SparkSession, pipeline: Pipeline, table: str, days: list[date]) -> FirstPublished:
    """When `table` first published each of `days` that it has published (`Calendar.publishes`), and any day at all
    (under its former name too, if renamed)."""
    calendar = pipeline.calendar
    if not days or calendar is None:
        return FirstPublished({}, None)
    names = [table, *([pipeline.renamed[table]] if table in pipeline.renamed else [])]  # a rename's first too
    trail = audit.read(spark, pipeline.name).where(F.col("asset").isin(names))
    # as epoch seconds: a collected timestamp would be read in the local timezone of this process
    at = F.unix_timestamp("ended_at")
    ends = spark.createDataFrame(
        [(d, int(clock.end_of(d, calendar.timezone).timestamp())) for d in set(days)], "day date, day_end long"
    )
    # Each write in one group: its day's, once the day has ended; else the rest's, so that the least of every
    # group's first is the table's first.
    counted = F.when(at >= F.col("day_end"), F.col("partition")).alias("partition")
    with_ends = trail.join(F.broadcast(ends), trail["partition"] == ends["day"], "left")
    per_day = with_ends.groupBy(counted).agg(F.min(at).alias("first")).collect()
    found = {r["partition"]: datetime.fromtimestamp(r["first"], UTC) for r in per_day if r["first"] is not None}
    of_days = {d: t for d, t in found.items() if d is not None}
    return FirstPublished(of_days, min(found.values(), default=None))


def outcomes(
    spark: SparkSession,
    pipeline: Pipeline,
    table: str,
    days: list[date],
    published_now: datetime | None = None,
    landed: datetime | None = None,
) -> list[checks.Outcome]:
    """The deadline check of `table` on `days`: published now at `published_now` (a write), or as the trail says
    (`check`); `landed`, when its newest rows landed (where known). When the trail cannot be read, the check fails
    on every day, saying why: at a write, after its commit, that must not fail the run."""
    calendar = pipeline.calendar
    if calendar is None or calendar.publish_by is None:
        return []
    try:
        earlier = first_published(spark, pipeline, table, days)
    except Exception as error:
        return [checks.deadline.DEADLINE.not_evaluated(day, error) for day in days]
    now = clock.now()
    # The table's first publication: its trail's, or this write's when it is the table's first.
    table_first = min((t for t in (earlier.table, published_now) if t is not None), default=None)
    found = []
    for day in days:
        deadline = calendar.deadline(day)
        assert deadline is not None
        times = [t for t in (earlier.days.get(day), published_now) if t is not None and calendar.publishes(day, t)]
        found.append(checks.deadline.outcome(day, deadline, min(times, default=None), landed, now, table_first))
    return found


# How many closed days back `metrics` reports missed deadlines.
REPORTED_DAYS = 30


def missed(spark: SparkSession, pipeline: Pipeline, table: str) -> list[date] | None:
    """The days of the last 30 closed ones that `table` first published after their deadline, or not by it (None:
    no deadline declared)."""
    calendar = pipeline.calendar
    if calendar is None or calendar.publish_by is None:
        return None
    newest, partitions = calendar.last_closed_day(clock.now()), pipeline.partitions
    days = [d for d in (newest - timedelta(days=n) for n in range(REPORTED_DAYS)) if d in partitions]
    return sorted(o.day for o in outcomes(spark, pipeline, table, sorted(days)) if not o.passed)
