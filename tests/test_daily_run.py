"""A pipeline that runs every day, on today's date: its partitions end at today in its timezone, so rows of today
land in range, and the daily run's tick at the day's close publishes them as one normal run of the day, checks
included; only a day after today is quarantined as out of range."""

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from pyspark.sql import types as T

from exact_backfills import Calendar, Pipeline, Source, Staging, clock
from exact_backfills.backfill import BackfillRequest, run_backfill
from exact_backfills.dagster_names import ALL_ASSETS_JOB
from exact_backfills.landing import land_batch
from exact_backfills.location import definitions_of
from exact_backfills.metrics import metrics
from tests.support import schedules, visits
from tests.support.lake import environment, rows

pytestmark = pytest.mark.slow

NEW_YORK = ZoneInfo("America/New_York")


def test_todays_rows_landed_now_are_published_by_the_daily_run_at_the_days_close(spark, lake):
    _, instance = lake
    pipeline, source = visits.pipeline, visits.VISITS  # New York's calendar, open: it ends today there
    today = clock.today("America/New_York")
    loaded = clock.now()
    landed = [
        (f"v{i}", today - timedelta(days=i % 2), loaded)
        for i in range(6)  # today's and yesterday's visits
    ] + [("v-tomorrow", today + timedelta(days=1), loaded)]  # not a partition yet: quarantined, with why
    with environment(PARTITION_START_DATE=(today - timedelta(days=3)).isoformat(), PARTITION_END_DATE=""):
        assert pipeline.partitions.last_day == today and pipeline.partitions.moving
        land_batch(source, spark.createDataFrame(landed, source.schema), clock.day_of(loaded, "UTC"))
        tick = schedules.tick(pipeline, pipeline.calendar.closes_at(today))  # today's close: 00:30 tomorrow in New York
        (request,) = tick.run_requests
        assert request.partition_key == today.isoformat()
        job = definitions_of(pipeline).resolve_job_def(ALL_ASSETS_JOB)
        result = job.execute_in_process(instance=instance, partition_key=request.partition_key, tags=request.tags)
    assert result.success
    published = sorted((r["visit_id"], r["visit_date"]) for r in rows(spark, "stg_visits"))
    assert published == [(f"v{i}", today) for i in (0, 2, 4)]  # the day's run wrote its day alone
    quarantined = [(r["visit_id"], r["reason"]) for r in rows(spark, "quarantine_visits")]
    assert quarantined == [("v-tomorrow", "visit_date_out_of_range")]
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks and all(checks.values()), checks


def test_each_day_shows_whether_it_was_first_published_by_its_deadline_and_a_restatement_does_not_make_it_late(
    spark, lake, tmp_path
):
    """A calendar with a deadline (06:00 the next morning, New York), its table first built four days ago: the day it
    was built for was due before that, its history, not late; today's day, published before its deadline, meets it;
    a day of three days ago, first published now, missed it by more than a day, its rows having landed after it;
    published again later, it keeps its first publication's lateness."""
    _, instance = lake
    pipeline = Pipeline(
        name="visits",
        sources=[visits.VISITS],
        tables=[Staging("stg_visits", source=visits.VISITS)],
        calendar=replace(visits.pipeline.calendar, publish_by=timedelta(hours=6)),
    )
    today = clock.today("America/New_York")
    first, late_day = today - timedelta(days=4), today - timedelta(days=3)

    def deadlines_of(result) -> dict[str, tuple[bool, dict]]:
        return {
            e.partition: (e.passed, {k: v.value for k, v in e.metadata.items()})
            for e in result.get_asset_check_evaluations()
            if e.check_name == "published_by_deadline"
        }

    days = {"PARTITION_START_DATE": first.isoformat(), "PARTITION_END_DATE": ""}
    with environment(**days, **{clock.SIMULATED_CLOCK: str(tmp_path / "clock")}):
        job = definitions_of(pipeline).resolve_job_def(ALL_ASSETS_JOB)
        # Four days ago, at noon in New York: the table's first build, of the day before
        clock.set_simulated(datetime.combine(late_day, datetime.min.time(), tzinfo=NEW_YORK) + timedelta(hours=12))
        land_batch(visits.VISITS, spark.createDataFrame([("d0", first, clock.now())], visits.VISITS.schema), first)
        built = job.execute_in_process(instance=instance, partition_key=first.isoformat())
        clock.set_simulated(datetime.now(UTC))  # now
        loaded = clock.now()
        land_batch(visits.VISITS, spark.createDataFrame([("d1", late_day, loaded)], visits.VISITS.schema), late_day)
        on_time = job.execute_in_process(instance=instance, partition_key=today.isoformat())
        late = job.execute_in_process(instance=instance, partition_key=late_day.isoformat())
        again = job.execute_in_process(instance=instance, partition_key=late_day.isoformat())
        figures = {m.asset: m for m in metrics(spark, pipeline).assets}
    history = deadlines_of(built)[first.isoformat()]
    assert history[0] is True and history[1]["why"].endswith("its history, not late"), history
    assert deadlines_of(on_time)[today.isoformat()][0] is True
    for result in (late, again):
        passed, found = deadlines_of(result)[late_day.isoformat()]
        assert not passed and found["late_by"].split()[1] == "h" and int(found["late_by"].split()[0]) >= 42, found
        assert found["why"].startswith("its rows landed at ") and found["why"].endswith(", after the deadline")
    assert (
        deadlines_of(again)[late_day.isoformat()][1]["first_published"]
        == deadlines_of(late)[late_day.isoformat()][1]["first_published"]
    )
    # `metrics`: the days of the last 30 that missed their deadline: published late, or not published (the days
    # between the late one and today, once their deadline has passed); not the history
    unpublished = [today - timedelta(days=n) for n in (2, 1)]
    due = [d for d in unpublished if pipeline.calendar.deadline(d) < clock.now()]
    assert figures["stg_visits"].missed_deadlines == sorted([late_day, *due])


def test_a_day_taken_from_an_instant_is_its_date_in_new_york_across_the_change_to_daylight_saving_time(spark, lake):
    """A source whose files carry when each visit happened (`day_of`): its day is that instant's date in New York,
    whose 9 March 2025 lasts 23 hours; a correction moving a visit past midnight moves it to the next day; an instant
    after the last day, or none, is quarantined with why."""
    _, instance = lake
    columns = [("visit_id", T.StringType(), False), ("visited_at", T.TimestampType(), True)]
    schema = T.StructType([T.StructField(*c) for c in columns] + [T.StructField("loaded_at", T.TimestampType(), False)])
    source = Source(
        "timed_visits", schema, key=["visit_id"], day="visit_date", newest="loaded_at", loaded_at="loaded_at",
        day_of="visited_at", timezone="America/New_York",
    )  # fmt: skip
    new_york = Calendar(first_day=date(2025, 3, 8), last_day=date(2025, 3, 10), timezone="America/New_York")
    staging = Staging("stg_timed_visits", source)
    pipeline = Pipeline("timed_visits", sources=[source], tables=[staging], calendar=new_york)
    loaded, corrected = datetime(2025, 3, 11, 12, tzinfo=UTC), datetime(2025, 3, 11, 13, tzinfo=UTC)
    landed = [
        ("before-midnight", datetime(2025, 3, 9, 4, 59, tzinfo=UTC), loaded),  # 23:59 on the 8th (EST)
        ("at-midnight", datetime(2025, 3, 9, 5, tzinfo=UTC), loaded),  # 00:00 on the 9th (EST)
        ("last-minute", datetime(2025, 3, 10, 3, 59, tzinfo=UTC), loaded),  # 23:59 on the 9th (EDT since 02:00)
        ("next-midnight", datetime(2025, 3, 10, 4, tzinfo=UTC), loaded),  # 00:00 on the 10th (EDT)
        ("moved", datetime(2025, 3, 9, 4, 50, tzinfo=UTC), loaded),  # 23:50 on the 8th...
        ("moved", datetime(2025, 3, 9, 5, 10, tzinfo=UTC), corrected),  # ...corrected: 00:10 on the 9th
        ("after-the-last-day", datetime(2025, 3, 11, 4, 30, tzinfo=UTC), loaded),  # 00:30 on the 11th
        ("no-instant", None, loaded),
    ]
    with environment(PARTITION_START_DATE="", PARTITION_END_DATE=""):
        land_batch(source, spark.createDataFrame(landed, schema), date(2025, 3, 11))
        said: list[str] = []
        request = BackfillRequest(pipeline, date(2025, 3, 8), date(2025, 3, 10), chunk_size=3)
        assert run_backfill(request, instance=instance, echo=said.append), "\n".join(said)
    staged = sorted((r["visit_id"], r["visit_date"]) for r in rows(spark, "stg_timed_visits"))
    assert staged == [
        ("at-midnight", date(2025, 3, 9)),
        ("before-midnight", date(2025, 3, 8)),
        ("last-minute", date(2025, 3, 9)),
        ("moved", date(2025, 3, 9)),
        ("next-midnight", date(2025, 3, 10)),
    ]
    quarantined = sorted((r["visit_id"], r["reason"]) for r in rows(spark, "quarantine_timed_visits"))
    assert quarantined == [("after-the-last-day", "visit_date_out_of_range"), ("no-instant", "null_visit_date")]
