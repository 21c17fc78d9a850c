"""Crashes and concurrent writers never stop the pipeline silently: a run whose process died is found, closed with a
message, and no longer holds late data back; two runs over the same days write one step at a time."""

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from datetime import date

import pytest
from dagster import DagsterEventType, DagsterRun, DagsterRunStatus, RunsFilter, SkipReason, build_sensor_context

from assets_pkg.generate import generate
from exact_backfills.backfill import BackfillRequest, run_backfill
from exact_backfills.cli import main
from exact_backfills.dagster_names import (
    ALL_ASSETS_JOB,
    CLI_BACKFILL_TAG,
    LAKE_WRITES_POOL,
    PROCESS_TAG,
    PUBLISH_STEP,
    REPAIR_OF_TAG,
)
from exact_backfills.definitions import defs
from exact_backfills.location import definitions_of
from resources.lake import REPO_ROOT
from tests.support.dagster_ui import DagsterDev
from tests.support.lake import TABLE_KEYS, from_scratch, rows
from tests.support.orders import ORDERS

# The sensor as the code location defines it, called as its tick calls it.
late_data_sensor = definitions_of(ORDERS).resolve_sensor_def("late_data_sensor")

pytestmark = pytest.mark.slow  # builds a lake and runs backfills: minutes, not seconds

START, END = date(2025, 1, 1), date(2025, 1, 6)


def _started_run(instance, tags: dict[str, str] | None = None, timeout: float = 300):
    """The first run (carrying `tags`) that has recorded its process (it is executing a step)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for run in instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.STARTED], tags=tags or {})):
            if PROCESS_TAG in run.tags:
                return run
        time.sleep(0.5)
    raise TimeoutError("no run started its first step")


@pytest.fixture(scope="module")
def built(spark, lake):
    _, instance = lake
    generate(spark, START, END, seed=2, rows_per_day=5)
    assert run_backfill(BackfillRequest(ORDERS, START, END), instance=instance, echo=lambda _: None)
    return instance


def _backfill(*args: str) -> subprocess.Popen:
    """`python -m assets_pkg backfill` over START..END in a process of its own, as a user starts it."""
    return subprocess.Popen(
        [sys.executable, "-m", "assets_pkg", "backfill", "--start", str(START), "--end", str(END), *args],
        cwd=REPO_ROOT,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def test_a_live_run_holds_late_data_back_by_name_and_once_killed_is_closed_and_holds_nothing(built, capsys):
    instance = built
    backfill = _backfill("--max-partitions-per-run", "1")
    try:
        run = _started_run(instance)
        # While it runs, the sensor waits for it, and says for which run and for how long.
        tick = late_data_sensor(build_sensor_context(instance=instance))
        assert (
            isinstance(tick, SkipReason) and f"waiting for run {run.run_id} (all_assets, STARTED, " in tick.skip_message
        )
        assert "alive" in tick.skip_message
    finally:
        # What an OOM kill or a lost machine does to a backfill: the process vanishes mid-run.
        os.killpg(backfill.pid, signal.SIGKILL)
        backfill.wait()
    assert instance.get_run_by_id(run.run_id).status == DagsterRunStatus.STARTED  # Dagster alone never learns

    capsys.readouterr()
    assert main(["runs"]) == 1
    listed = capsys.readouterr().out
    assert f"run {run.run_id} (all_assets, STARTED" in listed and "gone" in listed and "--close-dead" in listed

    tick = late_data_sensor(build_sensor_context(instance=instance))
    assert instance.get_run_by_id(run.run_id).status == DagsterRunStatus.FAILURE
    failure = instance.get_records_for_run(run.run_id, of_type=DagsterEventType.RUN_FAILURE).records[-1]
    assert "the process that executed this run" in failure.event_log_entry.message
    # The sensor went on to look at the landing instead of waiting for the dead run.
    assert not (isinstance(tick, SkipReason) and "waiting for" in tick.skip_message), tick
    assert main(["runs"]) == 0


def _write_intervals(instance, backfill_id: str) -> list[tuple[float, float, str]]:
    """(start, end, step) of every step of the command-line backfill's runs."""
    intervals = []
    for run in instance.get_runs(RunsFilter(tags={CLI_BACKFILL_TAG: backfill_id})):
        started = {}
        for record in instance.get_records_for_run(run.run_id).records:
            entry = record.event_log_entry
            kind = entry.dagster_event_type
            if kind == DagsterEventType.STEP_START:
                started[entry.step_key] = entry.timestamp
            elif kind in (DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE):
                intervals.append((started[entry.step_key], entry.timestamp, entry.step_key))
    return intervals


def test_two_backfills_over_the_same_days_at_once_write_one_step_at_a_time_and_both_succeed(spark, built):
    instance = built
    before = {table: rows(spark, table) for table in TABLE_KEYS}
    first, second = _backfill(), _backfill()
    outputs = [p.communicate(timeout=900)[0] for p in (first, second)]

    # Each process's whole output (stderr too) when one fails: pytest would shorten a list of them.
    assert [p.returncode for p in (first, second)] == [0, 0], "\n----\n".join(outputs)
    ids = [
        next(line for line in out.splitlines() if line.startswith("backfill ")).split()[1].rstrip(":")
        for out in outputs
    ]
    mine, theirs = (_write_intervals(instance, backfill_id) for backfill_id in ids)
    assert mine and theirs
    for a_start, a_end, a_step in mine:
        for b_start, b_end, b_step in theirs:
            assert a_end <= b_start or b_end <= a_start, f"{a_step} and {b_step} wrote at the same time"
    for table in TABLE_KEYS:
        assert rows(spark, table) == before[table], f"{table}: two runs of the same days changed its content"


def test_a_backfill_started_while_a_dead_run_holds_the_lake_writes_closes_that_run_says_so_and_publishes(spark, built):
    """A run whose process died mid-step still holds its lake_writes slot. A command-line backfill started after it
    marks it failed, says so and runs: it does not wait for that slot for good, in silence."""
    instance = built
    finished = subprocess.Popen(["true"])  # a process that has ended: its pid names no live process
    finished.wait()
    dead = instance.add_run(
        DagsterRun(
            job_name=ALL_ASSETS_JOB,
            run_id=str(uuid.uuid4()),
            status=DagsterRunStatus.STARTED,
            tags={PROCESS_TAG: f"{socket.gethostname()}:{finished.pid}:1"},
        )
    )
    storage = instance.event_log_storage
    storage.initialize_concurrency_limit_to_default(LAKE_WRITES_POOL)
    assert storage.claim_concurrency_slot(LAKE_WRITES_POOL, dead.run_id, PUBLISH_STEP).is_claimed
    before = {table: rows(spark, table) for table in TABLE_KEYS}

    backfill = _backfill()
    try:
        out = backfill.communicate(timeout=300)[0]
    finally:
        if backfill.poll() is None:
            os.killpg(backfill.pid, signal.SIGKILL)
    assert backfill.returncode == 0, out
    assert f"marked failed: run {dead.run_id}" in out and "it held the lake's writes" in out, out
    closed = instance.get_run_by_id(dead.run_id)
    assert closed.status == DagsterRunStatus.FAILURE
    assert not storage.get_concurrency_info(LAKE_WRITES_POOL).claimed_slots
    for table in TABLE_KEYS:
        assert rows(spark, table) == before[table], f"{table}: re-running built days changed its content"


def test_a_killed_daemon_run_is_closed_with_its_cause_its_backfill_ends_and_the_sensor_repairs_its_days(
    spark, built, lake, tmp_path
):
    """The code server that launched the run sees its process die and closes it (Dagster's own mechanism); the
    sensor's liveness check is the net for when nothing else is left to notice. The sensor then runs its days again."""
    root, instance = lake
    dev = DagsterDev(root / "dagster_home", env={"LAKE_ROOT": str(root), "LATE_DATA_SENSOR_INTERVAL_S": "2"})
    try:
        dev.wait_until_up()
        every_asset = [k.to_user_string() for k in defs.resolve_asset_graph().materializable_asset_keys]
        backfill_id = dev.launch_backfill(every_asset, [str(START)])
        run = _started_run(instance, tags={"dagster/backfill": backfill_id})
        pid = int(run.tags[PROCESS_TAG].rsplit(":", 2)[1])
        os.kill(pid, signal.SIGKILL)  # the run's own process, launched by the daemon

        deadline = time.monotonic() + 120
        while instance.get_run_by_id(run.run_id).status != DagsterRunStatus.FAILURE:
            assert time.monotonic() < deadline, "the dead run was not closed"
            time.sleep(1)
        said = [r.event_log_entry.message for r in instance.get_records_for_run(run.run_id).records]
        assert any(
            f"Run execution process for {run.run_id}" in m or "the process that executed this run" in m for m in said
        ), said[-5:]
        assert dev.wait_for_backfill(backfill_id, timeout=300)["status"] != "REQUESTED"

        # The sensor runs the dead run's days again, and the tables end as a from-scratch build makes them.
        deadline = time.monotonic() + 300
        while not (repairs := instance.get_runs(RunsFilter(tags={REPAIR_OF_TAG: run.run_id}))) or repairs[
            0
        ].status not in (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE):
            assert time.monotonic() < deadline, "the dead run's days were not run again"
            time.sleep(2)
        assert repairs[0].status == DagsterRunStatus.SUCCESS
    finally:
        dev.stop()
    expected = from_scratch(spark, tmp_path, START, END)
    assert {t: rows(spark, t) for t in expected} == expected
