"""Days pass on a simulated clock, and the daemon, its sensors and its schedule live on it, as on the wall clock: a
New York pipeline lands, closes and publishes each of five days, up to the change to daylight-saving time; late rows
and a correction restate earlier days; a day with no data is published empty; a backfill launched from the UI yields
to the daily run; one night the schedule is stopped and that day is published late. At the end every table equals a
from-scratch build of the same landing, every day met its deadline but the delayed one (as Dagster shows each day's
check: tests/test_live.py looks at it in the browser), and Dagster's last partition is the simulated today."""

import time
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from dagster import DagsterRunStatus, RunsFilter

from bench.harness import SimulatedDays
from exact_backfills import clock
from exact_backfills.checks.deadline import PUBLISHED_BY_DEADLINE
from exact_backfills.dagster_names import DAILY_RUN_SCHEDULE, LAKE_WRITES_POOL, RESTATE_JOB
from exact_backfills.landing import land_batch
from exact_backfills.live import FINISHED
from exact_backfills.metrics import metrics
from resources.lake import REPO_ROOT
from tests.pipelines.site_visits import REFERENCE, STG_VISITS, VISITS, WEEKLY_VISITS, pipeline
from tests.support.dagster_ui import DagsterDev
from tests.support.lake import environment, files_by_day, from_scratch, rows
from tests.support.late_batches import check_partition_statuses

pytestmark = pytest.mark.slow  # a real daemon through five simulated days: minutes

NEW_YORK = ZoneInfo("America/New_York")
FIRST, LAST = date(2025, 3, 5), date(2025, 3, 9)
DELAYED = date(2025, 3, 8)  # the night its schedule is stopped
NO_DATA = date(2025, 3, 6)
DST = date(2025, 3, 9)  # 23 hours in New York
BACKFILLED = date(2025, 3, 7)  # a backfill of every day so far launched from the UI that day

PARTITION_KEYS = """
query($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) { ... on AssetNode { partitionKeys } } }"""


def at(day: date, hour: int, minute: int = 0) -> datetime:
    """`hour`:`minute` on `day` in New York, in UTC."""
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=NEW_YORK).astimezone(UTC)


def visits_of(day: date) -> list[tuple[str, date]]:
    """The day's own visits: none on NO_DATA, a few otherwise."""
    return [] if day == NO_DATA else [(f"{day:%m%d}-{n}", day) for n in range(3 + day.day % 3)]


def landed_on(day: date) -> list[tuple[str, date]]:
    """What lands on `day`: its visits, and on some days late rows and a correction of earlier days."""
    late = {
        date(2025, 3, 7): [("0305-late", FIRST)],
        date(2025, 3, 9): [("0307-0", FIRST), ("0308-late", DELAYED)],  # a correction: the visit was two days before
    }
    return visits_of(day) + late.get(day, [])


class Stretch(SimulatedDays):
    """The simulated days, driven through the UI's daemon and GraphQL as a user's would be."""

    def __init__(self, spark, dev: DagsterDev, instance):
        super().__init__(dev, instance)
        self.spark = spark

    def land(self, day: date, until: tuple[DagsterRunStatus, ...] = (DagsterRunStatus.STARTED,)) -> None:
        """Lands what lands on `day`, now; once the tables exist, until the late-data sensor's run of it is `until`."""
        loaded = clock.now().replace(tzinfo=None)  # a timestamp column holds UTC
        landed = [(visit, visit_day, loaded) for visit, visit_day in landed_on(day)]
        if not landed:
            return
        before = self.instance.get_runs_count(RunsFilter(job_name=RESTATE_JOB))
        land_batch(VISITS, self.spark.createDataFrame(landed, VISITS.schema), day)
        if day == FIRST:  # the sensor waits for the first daily run to build the tables
            return
        deadline = time.monotonic() + 180
        while not self._restatement_after(before, until):
            assert time.monotonic() < deadline, f"the batch of {day} was not restated"
            time.sleep(0.5)

    def _restatement_after(self, count: int, statuses: tuple[DagsterRunStatus, ...]) -> bool:
        """Whether a restatement after the first `count` is `statuses` or has finished."""
        runs = self.instance.get_run_records(RunsFilter(job_name=RESTATE_JOB), ascending=True)
        return len(runs) > count and runs[-1].dagster_run.status in (*statuses, *FINISHED)


@pytest.fixture(scope="module")
def simulated(lake, tmp_path_factory):
    clock_file = tmp_path_factory.mktemp("clock") / "now"
    with environment(**{clock.SIMULATED_CLOCK: str(clock_file), "PARTITION_START_DATE": "", "PARTITION_END_DATE": ""}):
        clock.set_simulated(at(FIRST, 9))
        yield clock_file


def test_simulated_days_publish_on_time_but_the_delayed_one_and_end_as_a_from_scratch_build(
    spark, lake, simulated, tmp_path
):
    root, instance = lake
    dev = DagsterDev(
        root / "dagster_home",
        env={
            "LAKE_ROOT": str(root),
            "EXACT_BACKFILLS_PIPELINE": REFERENCE,
            "PYTHONPATH": str(REPO_ROOT),  # the pipeline's module is the tests'
            clock.SIMULATED_CLOCK: str(simulated),
            "PARTITION_START_DATE": "",
            "PARTITION_END_DATE": "",
            "LATE_DATA_SENSOR_INTERVAL_S": "3",
            "BACKFILL_MAX_PARTITIONS_PER_RUN": "1",  # the backfill of Mar 5..7 in three runs
        },
    )
    stretch = Stretch(spark, dev, instance)
    try:
        stretch.start()
        day = FIRST
        while day <= LAST:
            if day == DELAYED:  # nothing lands by its close, and its schedule is stopped for the night
                stretch.schedule(DAILY_RUN_SCHEDULE, running=False)
                stretch.move_to(at(day + timedelta(days=1), 7))  # past its 06:00 deadline
                stretch.land(day, until=FINISHED)  # the sensor publishes it now: late
                stretch.schedule(DAILY_RUN_SCHEDULE, running=True)
                day += timedelta(days=1)
                continue
            stretch.move_to(at(day, 10))
            # the sensor publishes what lands as it lands (once the first daily run built the tables)
            stretch.land(day, until=FINISHED if day == BACKFILLED else (DagsterRunStatus.STARTED,))
            if day == BACKFILLED:
                # A backfill of every day so far from the UI, a run a day, queued behind the one lake_writes slot
                # (held here: a long write under way) as the day closes.
                storage = instance.event_log_storage
                assert storage.claim_concurrency_slot(LAKE_WRITES_POOL, "a-long-write", "publish").is_claimed
                backfill = dev.launch_backfill([STG_VISITS, WEEKLY_VISITS], [d.isoformat() for d in _days(FIRST, day)])
                queued = _queued_backfill(instance, backfill)
            stretch.move_to(pipeline.calendar.closes_at(day) + timedelta(minutes=1))
            if day == BACKFILLED:
                stretch.daily_run_of(day, finished=False)
                storage.free_concurrency_slots_for_run("a-long-write")
            daily = stretch.daily_run_of(day)
            assert daily.dagster_run.status == DagsterRunStatus.SUCCESS, day
            # At the close on the simulated clock, in New York's time (the DST day's an hour earlier in UTC)
            assert pipeline.calendar.closes_at(day) <= daily.create_timestamp, day
            assert daily.create_timestamp < pipeline.calendar.closes_at(day) + timedelta(minutes=3), day
            if day == BACKFILLED:
                # Queued after them, the daily run (its priority higher) started before every run of the backfill.
                waiting = [instance.get_run_record_by_id(run_id) for run_id in queued]
                assert all(r.create_timestamp < daily.create_timestamp for r in waiting)
                assert all(r.start_time is None or r.start_time > daily.start_time for r in waiting)
            day += timedelta(days=1)
        dev.wait_until_idle()
        keys = dev.graphql(PARTITION_KEYS, {"key": {"path": [STG_VISITS]}})["assetNodeOrError"]["partitionKeys"]
        failed = instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.FAILURE]))
    finally:
        dev.stop()
    assert not failed, [r.dagster_run.run_id for r in failed]
    assert keys[0] == FIRST.isoformat() and keys[-1] == (LAST + timedelta(days=1)).isoformat()  # the simulated today
    assert clock.today("America/New_York") == LAST + timedelta(days=1)
    # Day by day, as the check's Partitions view shows it: each table's deadline check failed on the delayed day alone
    # (its rows landed at 07:00, an hour after its deadline, 06:00 on the morning clocks sprang forward)
    for table in (STG_VISITS, WEEKLY_VISITS):
        shown = check_partition_statuses(instance, table, PUBLISHED_BY_DEADLINE, pipeline)
        assert {d for d, status in shown.items() if status == "FAILED"} == {DELAYED.isoformat()}, (table, shown)
        on_time = [d for d in _days(FIRST, LAST) if d != DELAYED]
        assert all(shown.get(d.isoformat()) == "SUCCEEDED" for d in on_time), (table, shown)
    figures = {m.asset: m for m in metrics(spark, pipeline).assets}
    assert {t: figures[t].missed_deadlines for t in (STG_VISITS, WEEKLY_VISITS)} == {
        STG_VISITS: [DELAYED],
        WEEKLY_VISITS: [DELAYED],
    }
    # Up to the last closed day: today's days (a window's, restated after midnight) are in the making.
    expected = from_scratch(spark, tmp_path, FIRST, LAST, pipeline=pipeline, view=_closed_days)
    assert _closed_days(spark) == expected
    # After a day's writes and rewrites, each table-day is one live file: the write path writes a day as one, so
    # there is nothing to compact (the replaced files stay for time travel until a vacuum).
    for table, day in ((STG_VISITS, "visit_date"), (WEEKLY_VISITS, "visit_day")):
        assert {d: len(f) for d, f in files_by_day(spark, table, day).items() if len(f) != 1} == {}, table
    staged = {(r["visit_id"], r["visit_date"]) for r in rows(spark, STG_VISITS)}
    assert {("0305-late", FIRST), ("0307-0", FIRST), ("0308-late", DELAYED)} <= staged
    assert not any(visit_day == NO_DATA for _, visit_day in staged)
    assert any(visit_day == DST for _, visit_day in staged)


def _closed_days(spark) -> dict[str, list[dict]]:
    """Every table's rows of FIRST..LAST, by column name."""
    day_columns = {STG_VISITS: "visit_date", WEEKLY_VISITS: "visit_day", f"quarantine_{VISITS.name}": "quarantine_day"}
    assert set(day_columns) == set(pipeline.every_table)
    return {t: [r for r in rows(spark, t) if r[day] <= LAST] for t, day in day_columns.items()}


def _days(first: date, last: date) -> list[date]:
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def _queued_backfill(instance, backfill_id: str, timeout: float = 180) -> list[str]:
    """The backfill's runs, once it has queued them all."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = instance.get_run_records(RunsFilter(tags={"dagster/backfill": backfill_id}), ascending=True)
        if len(runs) >= 3:
            return [r.dagster_run.run_id for r in runs]
        time.sleep(0.5)
    raise TimeoutError(f"backfill {backfill_id}: its runs were not queued")
