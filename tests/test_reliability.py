"""A crashed run never stops the pipeline silently: a run whose process died is found, closed with a message, and no
longer holds late data back."""

import os
import signal
import subprocess
import sys
import time
from datetime import date

from dagster import DagsterEventType, DagsterRunStatus, RunsFilter, SkipReason, build_sensor_context

from assets_pkg import liveness
from assets_pkg.automation import late_data_sensor
from assets_pkg.backfill import run_backfill
from assets_pkg.cli import main
from assets_pkg.generate import generate
from resources.lake import REPO_ROOT

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


def test_a_live_run_holds_late_data_back_by_name_and_once_killed_is_closed_and_holds_nothing(spark, lake, capsys):
    root, instance = lake
    generate(spark, START, END, seed=2, rows_per_day=5)
    assert run_backfill(START, END, instance=instance, echo=lambda _: None)
    backfill = subprocess.Popen(
        [sys.executable, "-m", "assets_pkg", "backfill", "--start", str(START), "--end", str(END),
         "--max-partitions-per-run", "1"],
        cwd=REPO_ROOT, env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
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
