"""Fault injection: a process killed (SIGKILL, as an OOM kill or a lost machine does) at each point of a publication,
then the documented recovery. After each, every table equals a from-scratch build of the same landing and no run is
left STARTED. (A daemon-launched run killed mid-backfill: tests/test_reliability.py.)

The tests share one lake, whose fixture publishes its first days only: each test publishes days left unpublished
(the ones before it may have published some of them since)."""

import os
import subprocess
import sys
from datetime import date

import pytest
from dagster import DagsterRunStatus, RunRequest, RunsFilter, build_sensor_context

from assets_pkg.generate import generate
from exact_backfills.automation import landing_state
from exact_backfills.backfill import BackfillRequest, run_backfill
from exact_backfills.cli import main
from exact_backfills.dagster_names import REPAIR_OF_TAG, RESTATE_JOB
from exact_backfills.definitions import defs
from exact_backfills.liveness import ACTIVE
from exact_backfills.location import definitions_of
from exact_backfills.partitions import days as day_range
from exact_backfills.publish import KILL_AT
from resources import audit, control
from resources.lake import REPO_ROOT
from tests.support.lake import from_scratch, rows, versions
from tests.support.late_batches import corrections, land_batch, next_batch_day
from tests.support.orders import ORDERS, PUBLISH_ORDER, STG_ORDER_ITEMS

# The sensor as the code location defines it, called as its tick calls it.
late_data_sensor = definitions_of(ORDERS).resolve_sensor_def("late_data_sensor")

pytestmark = pytest.mark.slow  # builds a lake and runs backfills in processes of their own: minutes

START, END = date(2025, 1, 1), date(2025, 1, 9)
FIRST_HALF_END = date(2025, 1, 3)


@pytest.fixture(scope="module")
def built(spark, lake):
    _, instance = lake
    summary = generate(spark, START, END, seed=11, rows_per_day=6)
    last = date.fromisoformat(max(summary.batches))  # quarantine files rows by their batch's day
    assert run_backfill(BackfillRequest(ORDERS, START, FIRST_HALF_END), instance=instance, echo=lambda _: None)
    return instance, last


def killed(command: list[str], at: str) -> subprocess.CompletedProcess:
    """`python -m assets_pkg <command>` in a process of its own, killed with SIGKILL when it reaches `at`."""
    done = subprocess.run(
        [sys.executable, "-m", "assets_pkg", *command],
        cwd=REPO_ROOT,
        env={**os.environ, KILL_AT: at},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == -9, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    return done


def active(instance) -> list:
    return instance.get_runs(RunsFilter(statuses=ACTIVE))


def repair_by_the_sensor(instance) -> None:
    """What late_data_sensor does on its next tick: close the dead run, then launch a run of the same days."""
    request = late_data_sensor(build_sensor_context(instance=instance, definitions=defs, cursor=landing_state(ORDERS)))
    assert isinstance(request, RunRequest) and REPAIR_OF_TAG in request.tags, request
    job = defs.resolve_job_def(request.job_name)
    result = job.execute_in_process(
        instance=instance,
        tags=request.tags,
        raise_on_error=False,
        asset_selection=request.asset_selection if request.job_name != RESTATE_JOB else None,
    )
    assert result.success


def test_killed_after_building_before_any_commit_writes_nothing_and_rerunning_the_command_publishes_the_days(
    spark, built, tmp_path, capsys
):
    instance, _ = built
    before = {t: versions(spark, t)[0] for t in PUBLISH_ORDER}
    days = ["--start", "2025-01-04", "--end", "2025-01-05"]
    killed(["backfill", *days], "before-commits")
    assert {t: versions(spark, t)[0] for t in PUBLISH_ORDER} == before

    assert main(["runs", "--close-dead"]) == 0  # the documented recovery: close it, run the command again
    assert main(["backfill", *days]) == 0
    capsys.readouterr()
    assert active(instance) == []


def test_killed_between_two_tables_commits_is_repaired_by_the_sensor_to_the_from_scratch_result(spark, built, tmp_path):
    instance, last = built
    killed(["backfill", "--start", "2025-01-04", "--end", str(last)], f"commit:{STG_ORDER_ITEMS}")
    dead = instance.get_runs(limit=1)[0]
    assert dead.status == DagsterRunStatus.STARTED  # Dagster alone never learns

    repair_by_the_sensor(instance)
    assert instance.get_run_by_id(dead.run_id).status == DagsterRunStatus.FAILURE
    assert active(instance) == []
    expected = from_scratch(spark, tmp_path, START, last)
    assert {t: rows(spark, t) for t in expected} == expected


def publish_the_days_left_unpublished(spark, instance, last: date) -> None:
    """Every landed day published (the tests above leave them so; alone, this publishes them)."""
    audited = audit.read(spark, ORDERS.name).where(f"asset = '{STG_ORDER_ITEMS}'").select("partition")
    published = {r.partition for r in audited.collect()}
    unpublished = [d for d in day_range(START, last) if d not in published]
    if unpublished:
        assert run_backfill(
            BackfillRequest(ORDERS, unpublished[0], unpublished[-1]), instance=instance, echo=lambda _: None
        )


def test_a_restatement_killed_between_its_commits_and_its_watermark_is_repaired_to_the_from_scratch_result(
    spark, built, tmp_path
):
    instance, last = built
    publish_the_days_left_unpublished(spark, instance, last)
    batch = next_batch_day()
    land_batch(spark, corrections(spark, date(2025, 1, 2), 2) + corrections(spark, date(2025, 1, 7), 1), batch)
    killed(["restate"], "before-watermark")
    assert control.read_watermark(spark, ORDERS.name).pending_days  # the days it rewrote stay pending

    repair_by_the_sensor(instance)
    assert control.read_watermark(spark, ORDERS.name).pending_days == []
    assert active(instance) == []
    expected = from_scratch(spark, tmp_path, START, max(last, batch))
    assert {t: rows(spark, t) for t in expected} == expected
