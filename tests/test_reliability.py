"""Crashes and concurrent writers never stop the pipeline silently: a run whose process died is found, closed with a
message, and no longer holds late data back; two runs over the same days write one step at a time."""

import os
import signal
import subprocess
import sys
import time
from datetime import date

import pytest
from dagster import DagsterEventType, DagsterRunStatus, RunsFilter, SkipReason, build_sensor_context

from assets_pkg import liveness
from assets_pkg.assets import CLI_BACKFILL_TAG
from assets_pkg.automation import late_data_sensor
from assets_pkg.backfill import run_backfill
from assets_pkg.cli import main
from assets_pkg.generate import generate
from resources.lake import REPO_ROOT
from tests.conftest import TABLE_KEYS, rows

pytestmark = pytest.mark.slow  # builds a lake and runs backfills: minutes, not seconds

START, END = date(2025, 1, 1), date(2025, 1, 6)


def _started_run(instance, timeout: float = 300):
    """The first run that has recorded its process (it is executing a step)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for run in instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.STARTED])):
            if liveness.PROCESS_TAG in run.tags:
                return run
        time.sleep(0.5)
    raise TimeoutError("no run started its first step")


@pytest.fixture(scope="module")
def built(spark, lake):
    _, instance = lake
    generate(spark, START, END, seed=2, rows_per_day=5)
    assert run_backfill(START, END, instance=instance, echo=lambda _: None)
    return instance


def _backfill(*args: str) -> subprocess.Popen:
    """`python -m assets_pkg backfill` over START..END in a process of its own, as a user starts it."""
    return subprocess.Popen(
        [sys.executable, "-m", "assets_pkg", "backfill", "--start", str(START), "--end", str(END), *args],
        cwd=REPO_ROOT, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        start_new_session=True,
    )


def test_a_live_run_holds_late_data_back_by_name_and_once_killed_is_closed_and_holds_nothing(built, capsys):
    instance = built
    backfill = _backfill("--max-partitions-per-run", "1")
    try:
        run = _started_run(instance)
        # While it runs, the sensor waits for it, and says for which run and for how long.
        tick = late_data_sensor(build_sensor_context(instance=instance))
        assert isinstance(tick, SkipReason) and f"waiting for run {run.run_id} (all_assets, STARTED, " in tick.skip_message
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

    assert [p.returncode for p in (first, second)] == [0, 0], outputs
    ids = [out.split()[1].rstrip(":") for out in outputs]
    mine, theirs = (_write_intervals(instance, backfill_id) for backfill_id in ids)
    assert mine and theirs
    for a_start, a_end, a_step in mine:
        for b_start, b_end, b_step in theirs:
            assert a_end <= b_start or b_end <= a_start, f"{a_step} and {b_step} wrote at the same time"
    for table in TABLE_KEYS:
        assert rows(spark, table) == before[table], f"{table}: two runs of the same days changed its content"
