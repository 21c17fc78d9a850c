"""A pipeline's calendar, pure and fast: its days in its timezone, an open end at the current day there (as Dagster's
own partitions end), a day's close and deadline across daylight-saving changes, and the daily run's schedule: which
day each tick publishes."""

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from dagster import RunRequest, partition_loading_context
from hypothesis import given, settings
from hypothesis import strategies as st

from exact_backfills import Calendar, Pipeline, Staging, checks, clock
from exact_backfills.dagster_names import DAILY_RUN_PRIORITY, DAILY_RUN_TAG, PRIORITY_TAG
from exact_backfills.daily_run import cron_of, day_run_requests
from exact_backfills.location import definitions_of
from exact_backfills.overdue import overdue_days
from tests.support import schedules, visits
from tests.support.lake import environment

NEW_YORK = "America/New_York"
OPEN = Calendar(first_day=date(2024, 12, 1), timezone=NEW_YORK, publish_by=timedelta(hours=6))
UNPINNED = {"PARTITION_START_DATE": "", "PARTITION_END_DATE": ""}


def _at(text: str, timezone: str = "UTC") -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(timezone))


@pytest.mark.parametrize(
    ("instant", "new_york_day"),
    [
        (_at("2025-03-10T03:30"), date(2025, 3, 9)),  # 23:30 in New York, after its clocks sprang forward
        (_at("2025-03-10T04:30"), date(2025, 3, 10)),
        (_at("2025-11-02T04:30"), date(2025, 11, 2)),  # 00:30 EDT: the day of 25 hours has begun
        (_at("2025-11-03T04:30"), date(2025, 11, 2)),  # 23:30 EST: still that day
    ],
)
def test_an_open_calendar_ends_at_the_current_day_in_its_timezone_as_dagsters_partitions_do(instant, new_york_day):
    with environment(**UNPINNED):
        partitions = OPEN.in_effect(instant)
    assert (partitions.first_day, partitions.last_day, partitions.moving) == (date(2024, 12, 1), new_york_day, True)
    with partition_loading_context(effective_dt=instant):
        assert partitions.definition.get_last_partition_key() == new_york_day.isoformat()


@settings(max_examples=80, deadline=None)
@given(
    instant=st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2027, 12, 31)).map(
        lambda d: d.replace(tzinfo=UTC)
    ),
    timezone=st.sampled_from(["UTC", NEW_YORK, "Europe/Berlin", "Asia/Kolkata", "Pacific/Auckland"]),
)
def test_the_day_of_an_instant_is_the_partition_dagster_files_it_under(instant, timezone):
    with environment(**UNPINNED):
        partitions = Calendar(first_day=date(2024, 12, 1), timezone=timezone).in_effect(instant)
    day = clock.day_of(instant, timezone)
    assert partitions.last_day == day
    assert partitions.definition.get_partition_key_for_timestamp(instant.timestamp()) == day.isoformat()


def test_a_day_ends_at_the_midnight_after_it_in_its_timezone_so_a_daylight_saving_day_lasts_23_or_25_hours():
    short, long = date(2025, 3, 9), date(2025, 11, 2)
    assert clock.end_of(short, NEW_YORK) - clock.end_of(short - timedelta(days=1), NEW_YORK) == timedelta(hours=23)
    assert clock.end_of(long, NEW_YORK) - clock.end_of(long - timedelta(days=1), NEW_YORK) == timedelta(hours=25)
    assert OPEN.closes_at(short) == _at("2025-03-10T00:30", NEW_YORK)  # closes_after defaults to 30 minutes
    assert OPEN.deadline(short) == _at("2025-03-10T06:00", NEW_YORK) == _at("2025-03-10T10:00")  # EDT: UTC-4
    # 06:00 the next morning on the wall clock, the mornings clocks change included: 5 h after midnight EST on Mar 9,
    # 7 h after midnight EDT on Nov 2
    assert OPEN.deadline(date(2025, 3, 8)) == _at("2025-03-09T06:00", NEW_YORK) == _at("2025-03-09T10:00")
    assert OPEN.deadline(date(2025, 11, 1)) == _at("2025-11-02T06:00", NEW_YORK) == _at("2025-11-02T11:00")
    assert Calendar(first_day=date(2025, 1, 1)).deadline(short) is None  # no publish_by: no deadline


def test_a_fixed_calendar_ends_on_its_last_day_and_the_environment_stands_in_for_either_end():
    fixed = Calendar(first_day=date(2025, 1, 1), last_day=date(2025, 3, 31))
    with environment(**UNPINNED):
        assert (fixed.in_effect().last_day, fixed.in_effect().moving) == (date(2025, 3, 31), False)
    with environment(PARTITION_START_DATE="", PARTITION_END_DATE="2025-02-01"):
        pinned = OPEN.in_effect(_at("2026-06-01T12:00"))
    assert (pinned.first_day, pinned.last_day, pinned.moving) == (date(2024, 12, 1), date(2025, 2, 1), False)
    assert pinned.definition.get_last_partition_key() == "2025-02-01"


@pytest.mark.parametrize(
    ("calendar", "said"),
    [
        (Calendar(date(2025, 1, 1), closes_after=timedelta(hours=25)), "closes_after 1 day, 1:00:00 is not a"),
        (Calendar(date(2025, 1, 1), closes_after=timedelta(seconds=90)), "closes_after 0:01:30 is not a whole number"),
        (
            Calendar(date(2025, 1, 1), closes_after=timedelta(hours=2), publish_by=timedelta(hours=1)),
            "publish_by 1:00:00 is not a timedelta at or after its closes_after",
        ),
    ],
)
def test_a_close_or_deadline_that_cannot_be_kept_is_refused(calendar, said):
    assert any(p.startswith(f"its calendar's {said}") for p in calendar.problems()), calendar.problems()


def _pipeline(calendar: Calendar) -> Pipeline:
    return Pipeline(
        name="visits", sources=[visits.VISITS], tables=[Staging("stg_visits", source=visits.VISITS)], calendar=calendar
    )


@pytest.mark.parametrize(
    ("tick", "day"),
    [
        (_at("2025-03-10T00:30", NEW_YORK), date(2025, 3, 9)),  # the 23-hour day, closed
        (_at("2025-11-03T00:30", NEW_YORK), date(2025, 11, 2)),  # the 25-hour day, closed
        (_at("2025-01-02T00:30", NEW_YORK), date(2025, 1, 1)),
    ],
)
def test_each_tick_of_the_daily_run_publishes_the_day_that_closed_as_one_run_ahead_of_backfills(tick, day):
    pipeline = _pipeline(OPEN)
    with environment(**UNPINNED):
        request, schedule = schedules.tick(pipeline, tick).run_requests[-1], schedules.daily_run(pipeline)
    assert (
        (schedule.cron_schedule, schedule.execution_timezone) == (cron_of(OPEN), NEW_YORK) == ("30 0 * * *", NEW_YORK)
    )
    assert isinstance(request, RunRequest)
    assert (request.partition_key, request.run_key) == (day.isoformat(), day.isoformat())
    assert request.tags[PRIORITY_TAG] == DAILY_RUN_PRIORITY and request.tags[DAILY_RUN_TAG] == day.isoformat()


def test_a_tick_also_publishes_the_days_of_the_week_before_that_a_missed_tick_left_unpublished():
    """The daemon was down at the 5th's tick: at the 7th's close the tick requests the 5th and the 7th; the days
    before the first partition are not asked for."""
    from dagster import AssetMaterialization, DagsterInstance

    pipeline = _pipeline(OPEN)
    with (
        environment(PARTITION_START_DATE="2025-03-02", PARTITION_END_DATE=""),
        DagsterInstance.ephemeral() as instance,
    ):
        for day in (2, 3, 4, 6):
            instance.report_runless_asset_event(AssetMaterialization("stg_visits", partition=f"2025-03-0{day}"))
        # what the tick evaluates with the daemon's instance
        requests = day_run_requests(pipeline, instance, _at("2025-03-08T00:30", NEW_YORK))
    assert [r.partition_key for r in requests] == ["2025-03-05", "2025-03-07"]
    assert [r.run_key for r in requests] == ["2025-03-05", "2025-03-07"]


def test_the_daily_run_skips_saying_why_a_closed_day_outside_the_partitions_is_not_published():
    with environment(PARTITION_START_DATE="2025-01-01", PARTITION_END_DATE="2025-03-31"):
        result = schedules.tick(_pipeline(OPEN), _at("2026-06-02T00:30", NEW_YORK))
    assert not result.run_requests
    assert result.skip_message == "2026-06-01 closed, outside the partitions 2025-01-01..2025-03-31"


DEADLINE = _at("2025-03-10T06:00", NEW_YORK)  # the 9 March's: 06:00 the next morning


@pytest.mark.parametrize(
    ("first_published", "landed", "now", "passed", "late_by", "why"),
    [
        (_at("2025-03-10T01:10", NEW_YORK), _at("2025-03-10T00:40", NEW_YORK), DEADLINE, True, None, None),
        (
            _at("2025-03-10T08:15", NEW_YORK),
            _at("2025-03-10T07:50", NEW_YORK),
            _at("2025-03-11T00:00"),
            False,
            "2 h 15 min",
            "its rows landed at 2025-03-10 11:50 UTC, after the deadline",
        ),
        (
            _at("2025-03-10T06:20", NEW_YORK),
            _at("2025-03-09T23:00", NEW_YORK),
            _at("2025-03-11T00:00"),
            False,
            "20 min",
            "its rows landed in time; its run published it late (queued behind others, failed, or not run)",
        ),
        (
            _at("2025-03-10T06:20", NEW_YORK),
            None,  # a table whose rows carry no load time: nothing said of when they landed
            _at("2025-03-11T00:00"),
            False,
            "20 min",
            "its run published it after the deadline (when its rows landed: its staging table's result says)",
        ),
        (None, None, _at("2025-03-10T05:00", NEW_YORK), True, None, "not published yet, not due yet"),
        (None, None, _at("2025-03-10T07:30", NEW_YORK), False, "1 h 30 min", "not published yet"),
        # Its table first published (a day) after the deadline: a backfill of its history when it was built
        (
            _at("2025-04-02T09:00"),
            None,
            _at("2025-04-02T09:00"),
            True,
            None,
            "due before the table was first published (2025-04-01 12:00 UTC): its history, not late",
        ),
        # ... or first published before it: the day is judged
        (
            _at("2025-03-10T08:00", NEW_YORK),
            None,
            _at("2025-03-11T00:00"),
            False,
            "2 h 00 min",
            "its run published it after the deadline (when its rows landed: its staging table's result says)",
        ),
    ],
)
def test_a_day_is_late_when_first_published_after_its_deadline_or_not_published_by_it_saying_how_late_and_why(
    first_published, landed, now, passed, late_by, why
):
    deadline = OPEN.deadline(date(2025, 3, 9))
    assert deadline == DEADLINE
    table_first = _at("2025-04-01T12:00") if now.month == 4 else _at("2025-03-01T00:00")
    found = checks.deadline.outcome(date(2025, 3, 9), deadline, first_published, landed, now, table_first)
    assert (found.passed, found.metadata.get("late_by"), found.metadata.get("why")) == (passed, late_by, why)
    assert found.metadata["deadline"] == "2025-03-10 10:00 UTC"


@pytest.mark.parametrize(
    ("written_at", "publishes"),
    [
        (_at("2025-03-09T23:59", NEW_YORK), False),  # the day in the making: a window's restatement reaching it
        (_at("2025-03-10T00:00", NEW_YORK), True),  # its end in New York, an hour earlier in UTC than the day before
        (_at("2025-03-10T03:59"), False),  # 23:59 EDT
        (_at("2025-03-10T09:00", NEW_YORK), True),
    ],
)
def test_a_write_publishes_a_day_from_its_end_on_not_while_the_day_is_in_the_making(written_at, publishes):
    assert OPEN.publishes(date(2025, 3, 9), written_at) is publishes


def _evaluations(instance) -> dict[tuple[str, str], tuple[bool, str]]:
    from dagster import DagsterEventType, EventRecordsFilter

    records = instance.get_event_records(EventRecordsFilter(event_type=DagsterEventType.ASSET_CHECK_EVALUATION))
    found = {}
    for record in records:
        evaluation = record.event_log_entry.dagster_event.event_specific_data
        key = (evaluation.asset_key.to_user_string(), evaluation.partition)
        found[key] = (evaluation.passed, evaluation.metadata["why"].value)
    return found


def _count(instance) -> int:
    from dagster import DagsterEventType, EventRecordsFilter

    return len(instance.get_event_records(EventRecordsFilter(event_type=DagsterEventType.ASSET_CHECK_EVALUATION)))


def test_the_days_overdue_are_those_whose_deadline_passed_within_the_last_week_after_the_last_reported():
    at = _at("2025-03-12T12:00")  # 08:00 in New York: the 11th's deadline, 06:00, has passed
    assert overdue_days(OPEN, date(2025, 3, 9), at, None) == [date(2025, 3, 9), date(2025, 3, 10), date(2025, 3, 11)]
    assert overdue_days(OPEN, date(2025, 3, 9), _at("2025-03-12T09:59"), None)[-1] == date(2025, 3, 10)  # 05:59
    assert overdue_days(OPEN, date(2025, 3, 1), at, date(2025, 3, 10)) == [date(2025, 3, 11)]
    assert overdue_days(OPEN, date(2025, 1, 1), at, None)[0] == date(2025, 3, 5)  # a week back, no further


def test_a_day_not_published_by_its_deadline_fails_on_each_table_that_has_not_published_it_as_the_deadline_passes():
    """The deadline sensor, now: three days ago missed its deadline unpublished and fails 'not published yet'; two
    days ago was published and is left alone; yesterday fails only once its deadline (06:00 today in New York) has
    passed; the next tick reports nothing again."""
    from dagster import AssetMaterialization, DagsterInstance, build_sensor_context

    today = clock.today(NEW_YORK)
    days = {n: (today - timedelta(days=n)).isoformat() for n in (1, 2, 3)}
    pipeline = _pipeline(OPEN)
    with environment(PARTITION_START_DATE=days[3], PARTITION_END_DATE=""):
        definitions = definitions_of(pipeline)
        sensor = definitions.get_sensor_def("deadline_sensor")
        with DagsterInstance.ephemeral() as instance:
            instance.report_runless_asset_event(AssetMaterialization("stg_visits", partition=days[2]))
            context = build_sensor_context(instance=instance, repository_def=definitions.get_repository_def())
            sensor(context)
            reported, cursor, count = _evaluations(instance), context.cursor, _count(instance)
            sensor(context)
            assert _count(instance) == count  # nothing reported twice
    expected = {("stg_visits", days[3]): (False, "not published yet")}
    yesterday_due = OPEN.deadline(today - timedelta(days=1)) < clock.now()
    if yesterday_due:
        expected[("stg_visits", days[1])] = (False, "not published yet")
    assert reported == expected
    assert cursor == (days[1] if yesterday_due else days[2])  # the newest day whose deadline passed


def test_a_deadline_that_cannot_be_evaluated_fails_on_every_day_saying_why():
    """The audit trail unreadable (here: no session to read it with): failed, never passed, and the write that asked
    is not failed by it."""
    from exact_backfills import deadlines

    pipeline = _pipeline(OPEN)
    with environment(PARTITION_START_DATE="2025-03-01", PARTITION_END_DATE="2025-03-31"):
        found = deadlines.outcomes(None, pipeline, "stg_visits", [date(2025, 3, 9), date(2025, 3, 10)])  # type: ignore[arg-type]
    assert [(o.day, o.passed, o.evaluated) for o in found] == [
        (date(2025, 3, 9), False, False),
        (date(2025, 3, 10), False, False),
    ]
    assert found[0].metadata["error"].startswith("could not be evaluated: AttributeError: ")
