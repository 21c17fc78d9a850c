"""A fortnight of the ML pipeline on a simulated clock, which the daemon, its sensors and its schedule live on as on
the wall clock. A New York team's days: each night's batch of app events, user status changes and labels lands (retried
events, events landing days late, status changes landing late, labels two to three weeks after their day), the
late-data sensor publishes it, the day closes and the daily run publishes it, up to the change to daylight-saving
time. One night brings no batch: the day is published empty, then restated as its late events land. One night the
daemon is down: that day is published late. Days keep arriving while a backfill of every day so far, launched from
the UI, yields to the daily run, and after a code change to the features, planned and promoted on the days it changes,
then deployed. At the end every table equals a from-scratch build of the same landing with the new code, every day
met its deadline but the late one (day by day, as Dagster's check shows it), and Dagster's last partition is the
simulated today."""

import json
import shutil
import time
from datetime import date, timedelta
from pathlib import Path

import pytest
from dagster import DagsterRunStatus, RunsFilter

from bench.harness import Edit, SimulatedDays, edited, project_copy
from exact_backfills import clock
from exact_backfills.backfill import BackfillRequest, run_backfill
from exact_backfills.checks.deadline import PUBLISHED_BY_DEADLINE
from exact_backfills.dagster_names import LAKE_WRITES_POOL
from exact_backfills.live import LOCATION, Outbox
from exact_backfills.metrics import metrics
from examples.ml_features.pipeline import STG_APP_EVENTS, TRAINING_SET, USER_DAILY_FEATURES
from resources.lake import REPO_ROOT
from resources.settings import settings
from tests.pipelines.ml_daily import REFERENCE, pipeline
from tests.support.dagster_ui import DagsterDev
from tests.support.lake import copy_landing, environment, files_by_day, rows
from tests.support.late_batches import check_partition_statuses
from tests.support.projects import run_commands, run_in

pytestmark = pytest.mark.slow  # a real daemon through fourteen simulated days: minutes

FIRST = date(2025, 2, 8)  # the pipeline's first day
HISTORY = (FIRST, date(2025, 2, 23))  # built before the UI starts: the labels of its first days have landed by then
LIVE_DAYS = [date(2025, 2, 24) + timedelta(days=n) for n in range(14)]
LAST = LIVE_DAYS[-1]  # Mar 9, when clocks spring forward in New York: a day of 23 hours
NO_BATCH = date(2025, 2, 26)  # no batch lands the night after it
LATE = date(2025, 3, 1)  # the daemon is down the night after it
BACKFILLED = date(2025, 3, 3)  # a backfill of every day so far is launched from the UI that day
CHANGED = date(2025, 3, 5)  # after its daily run the features' code changes
CHECKED = (STG_APP_EVENTS, USER_DAILY_FEATURES, TRAINING_SET)

# A purchase counts at most 60 in a user's daily amount: a new code version of the features and the training set.
CAPPED = Edit(
    "examples/ml_features/transforms.py",
    'F.sum(F.coalesce("amount", F.lit(0))).alias("amount")',
    'F.sum(F.least(F.coalesce("amount", F.lit(0)), F.lit(60))).alias("amount")',
)
RELOAD = """
mutation($location: String!) { reloadRepositoryLocation(repositoryLocationName: $location) { __typename } }"""
PARTITION_KEYS = """
query($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) { ... on AssetNode { partitionKeys } } }"""


@pytest.fixture(scope="module")
def simulated(lake, tmp_path_factory):
    clock_file = tmp_path_factory.mktemp("clock") / "now"
    calendar = pipeline.calendar
    assert calendar is not None
    with environment(**{clock.SIMULATED_CLOCK: str(clock_file), "PARTITION_START_DATE": "", "PARTITION_END_DATE": ""}):
        clock.set_simulated(calendar.closes_at(HISTORY[1]) + timedelta(minutes=1))
        yield clock_file


def test_a_fortnight_of_the_ml_pipeline_publishes_on_time_but_the_late_day_and_ends_as_a_from_scratch_build(
    spark, lake, simulated, tmp_path
):
    root, instance = lake
    calendar = pipeline.calendar
    assert calendar is not None
    outbox = Outbox(tmp_path / "outbox")
    outbox.generate(pipeline, FIRST, LAST, rows_per_day=12)
    night = [outbox.root / "landing" / s.name / f"ingest_date={NO_BATCH + timedelta(days=1)}" for s in pipeline.sources]
    assert night[0].exists()  # the events' batch at least
    for batch in night:  # the night after NO_BATCH brings nothing
        shutil.rmtree(batch, ignore_errors=True)
    outbox.deliver(pipeline, through=HISTORY[1])
    assert run_backfill(BackfillRequest(pipeline, *HISTORY, chunk_size=366), instance=instance, echo=lambda _: None)
    # The code location is served from a copy of the project, where the code change is deployed
    served = project_copy(tmp_path / "served")
    path = f"{served}:{REPO_ROOT}"  # the project's code from the copy, this declaration from the tests
    dev = DagsterDev(
        root / "dagster_home",
        env={
            "LAKE_ROOT": str(root),
            "EXACT_BACKFILLS_PIPELINE": REFERENCE,
            "PYTHONPATH": path,
            "DELTA_JARS_DIR": settings().delta_jars_dir,  # the repository's, not the copy's
            clock.SIMULATED_CLOCK: str(simulated),
            "PARTITION_START_DATE": "",
            "PARTITION_END_DATE": "",
            "LATE_DATA_SENSOR_INTERVAL_S": "3",
            "BACKFILL_MAX_PARTITIONS_PER_RUN": "14",  # the backfill of Feb 8..Mar 2 in two runs
        },
        workspace=served / "workspace.yaml",
    )
    days = SimulatedDays(dev, instance)
    try:
        days.start()
        for day in LIVE_DAYS:
            before = days.restatements()
            if day == LATE:  # the daemon is down: the batch lands on time, nothing runs until after the deadline
                deadline = calendar.deadline(day)
                assert deadline is not None
                days.move_to(deadline + timedelta(hours=1))
                outbox.deliver(pipeline, through=day + timedelta(days=1))
                late = days.daily_run_of(day)  # the scheduler's tick at the close, caught up
                assert late.dagster_run.status == DagsterRunStatus.SUCCESS
                days.restatement_after(before)
                continue
            days.move_to(clock.end_of(day, calendar.timezone) + calendar.closes_after * 3 / 4)
            if outbox.deliver(pipeline, through=day + timedelta(days=1)):
                assert days.restatement_after(before).dagster_run.status == DagsterRunStatus.SUCCESS, day
            if day == BACKFILLED:
                # Every day so far from the UI, in two runs, queued behind the one lake_writes slot (held here: a long
                # write under way) as the day closes.
                storage = instance.event_log_storage
                assert storage.claim_concurrency_slot(LAKE_WRITES_POOL, "a-long-write", "publish").is_claimed
                so_far = [(FIRST + timedelta(days=n)).isoformat() for n in range((day - FIRST).days)]
                backfill = dev.launch_backfill([t.name for t in pipeline.tables], so_far)
                queued = _queued(instance, backfill, runs=2)
            days.move_to(calendar.closes_at(day) + timedelta(minutes=1))
            if day == BACKFILLED:
                days.daily_run_of(day, finished=False)
                storage.free_concurrency_slots_for_run("a-long-write")
            daily = days.daily_run_of(day)
            assert daily.dagster_run.status == DagsterRunStatus.SUCCESS, day
            # At the close on the simulated clock, in New York's time (the DST day's an hour earlier in UTC)
            assert calendar.closes_at(day) <= daily.create_timestamp < calendar.closes_at(day) + timedelta(minutes=3)
            if day == BACKFILLED:
                # Queued after them, the daily run (its priority higher) started before every run of the backfill.
                waiting = [instance.get_run_record_by_id(run_id) for run_id in queued]
                assert all(r.create_timestamp < daily.create_timestamp for r in waiting)
                assert all(r.start_time is None or r.start_time > daily.start_time for r in waiting)
            if day == CHANGED:
                _deploy(dev, served, path)
        dev.wait_until_idle()
        keys = dev.graphql(PARTITION_KEYS, {"key": {"path": [STG_APP_EVENTS]}})["assetNodeOrError"]["partitionKeys"]
        failed = instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.FAILURE]))
    finally:
        dev.stop()
    assert not failed, [r.dagster_run.run_id for r in failed]
    assert keys[0] == FIRST.isoformat() and keys[-1] == (LAST + timedelta(days=1)).isoformat()  # the simulated today
    # Day by day, as the check's Partitions view shows it: each table's deadline check failed on the late day alone
    # (the history's days but its last were built after they were due)
    for table in CHECKED:
        shown = check_partition_statuses(instance, table, PUBLISHED_BY_DEADLINE, pipeline)
        assert {d for d in LIVE_DAYS if shown.get(d.isoformat()) != "SUCCEEDED"} == {LATE}, (table, shown)
        assert shown[LATE.isoformat()] == "FAILED", table
    figures = {m.asset: m for m in metrics(spark, pipeline).assets}
    assert {t: set(figures[t].missed_deadlines or []) & set(LIVE_DAYS) for t in CHECKED} == dict.fromkeys(
        CHECKED, {LATE}
    )
    # Up to the last closed day, equal to a from-scratch build with the new code: today's days are in the making.
    assert _closed_days(spark) == _from_scratch(spark, served, tmp_path / "scratch")
    # Each table-day is one live file after a fortnight of writes and rewrites: nothing to compact.
    for table in pipeline.publish_order:
        day = pipeline.day_columns[table]
        assert {d: len(f) for d, f in files_by_day(spark, table, day).items() if len(f) != 1} == {}, table
    # The night without a batch: the day's events staged are the late ones alone, landed in later batches.
    staged = [r for r in rows(spark, STG_APP_EVENTS) if r["event_date"] == NO_BATCH]
    assert all(r["ingest_date"] > NO_BATCH + timedelta(days=1) for r in staged), staged


def _deploy(dev: DagsterDev, served: Path, path: str) -> None:
    """The code change to the features, once the day's runs are done: planned and promoted with the new code, on
    exactly the days it changes, then deployed where the code location is served from, and the location reloaded."""
    dev.wait_until_idle()
    edited(served, CAPPED)
    planned, promoted = run_commands(
        served,
        ["--pipeline", REFERENCE, "plan", "--json"],
        ["--pipeline", REFERENCE, "promote", "{plan_id}"],
        PYTHONPATH=path,
    )
    plan = json.loads(planned.out)
    assert planned.code == 0 and plan["promotable"], planned.err
    assert plan["tables"][USER_DAILY_FEATURES]["changed_days"], plan
    assert not plan["tables"].get(STG_APP_EVENTS, {}).get("changed_days"), plan
    assert promoted.code == 0, promoted.err
    assert (
        dev.graphql(RELOAD, {"location": LOCATION})["reloadRepositoryLocation"]["__typename"]
        == "WorkspaceLocationEntry"
    )
    dev.wait_until_up()


def _from_scratch(spark, project: Path, scratch: Path) -> dict[str, list[dict]]:
    """Every table's rows up to LAST, built from scratch by `project`'s code over a copy of the landing in one run."""
    copy_landing(scratch)
    backfill = ["-m", "exact_backfills", "--pipeline", REFERENCE, "backfill", "--start", FIRST.isoformat()]
    backfill += ["--end", LAST.isoformat(), "--max-partitions-per-run", "366"]
    env = {"LAKE_ROOT": str(scratch), "DAGSTER_HOME": str(scratch / "home"), "PYTHONPATH": f"{project}:{REPO_ROOT}"}
    run_in(project, *backfill, **env)
    with environment(LAKE_ROOT=str(scratch)):
        return _closed_days(spark)


def _closed_days(spark) -> dict[str, list[dict]]:
    """Every table's rows of FIRST..LAST, by column name."""
    return {t: [r for r in rows(spark, t) if r[pipeline.day_columns[t]] <= LAST] for t in pipeline.every_table}


def _queued(instance, backfill_id: str, runs: int, timeout: float = 180) -> list[str]:
    """The backfill's runs, once it has queued them all."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = instance.get_run_records(RunsFilter(tags={"dagster/backfill": backfill_id}), ascending=True)
        if len(found) >= runs:
            return [r.dagster_run.run_id for r in found]
        time.sleep(0.5)
    raise TimeoutError(f"backfill {backfill_id}: its runs were not queued")
