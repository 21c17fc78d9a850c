"""What users do in the UI, with a real webserver and daemon, on a lake of 90 built days: a partition-range backfill
runs in chunked runs and changes nothing it re-runs; a late batch is restated by the sensor on exactly the days it
changes. The tests share the lake and run in file order."""

from datetime import date, timedelta

import pytest

from assets_pkg import late_data
from assets_pkg.automation import LANDING_STATE_TAG, RESTATE_JOB, landing_state
from assets_pkg.backfill import run_backfill, run_restatement
from assets_pkg.checks import RECONCILES, UP_TO_DATE, UNIQUE_KEY
from assets_pkg.definitions import defs
from assets_pkg.generate import generate
from resources import control
from resources.delta_io import read_table
from tests.conftest import TABLE_KEYS, duplicate_keys, rows
from tests.dagster_ui import DagsterDev, instance_at
from tests.late_batches import (
    ORDER_TABLES,
    assert_rewrote_exactly,
    land_batch,
    latest_check_status,
    next_batch_day,
    snapshot,
    three_corrected_and_two_late_days,
)

START, DAYS, UI_DAYS, CHUNK = date(2025, 1, 1), 90, 30, 15


@pytest.fixture(scope="module")
def dagster_dev(spark, lake):
    root, _ = lake
    end = START + timedelta(days=DAYS - 1)
    generate(spark, START, end, seed=5, rows_per_day=20)
    home = root / "dagster_dev_home"
    with instance_at(home) as instance:
        # The history, built in-process in one run and recorded in the instance the webserver reads; then what the
        # `restate` command does, which the sensor sees and does not repeat for the same landing.
        assert run_backfill(START, end, chunk_size=DAYS, instance=instance, echo=lambda _: None)
        assert run_restatement(instance).success
    dev = DagsterDev(home, env={"LAKE_ROOT": str(root), "BACKFILL_MAX_PARTITIONS_PER_RUN": str(CHUNK), "LATE_DATA_SENSOR_INTERVAL_S": "5"})
    try:
        dev.wait_until_up()
        yield dev
    finally:
        dev.stop()


@pytest.mark.daemon
def test_a_30_day_ui_backfill_of_every_asset_runs_in_chunks_and_changes_nothing_it_reruns(spark, dagster_dev):
    days = [(START + timedelta(days=i)).isoformat() for i in range(UI_DAYS)]
    every_asset = [k.to_user_string() for k in defs.resolve_asset_graph().materializable_asset_keys]
    before = {table: rows(spark, table) for table in TABLE_KEYS}
    backfill_id = dagster_dev.launch_backfill(every_asset, days)
    backfill = dagster_dev.wait_for_backfill(backfill_id)

    assert backfill["status"] == "COMPLETED_SUCCESS", backfill
    runs = backfill["runs"]
    assert all(r["status"] == "SUCCESS" for r in runs)
    # Chunked: a few runs of at most CHUNK days, never one run per day.
    ranges = set()
    for run in runs:
        tags = {t["key"]: t["value"] for t in run["tags"]}
        first = date.fromisoformat(tags["dagster/asset_partition_range_start"])
        last = date.fromisoformat(tags["dagster/asset_partition_range_end"])
        assert (last - first).days + 1 <= CHUNK
        ranges.add((first, last))
    assert len(runs) < UI_DAYS // 2
    covered = {first + timedelta(days=i) for first, last in ranges for i in range((last - first).days + 1)}
    assert covered == {date.fromisoformat(d) for d in days}

    for table in TABLE_KEYS:
        assert duplicate_keys(spark, table) == 0, table
        assert rows(spark, table) == before[table], f"{table}: re-running the range changed its content"
    assert read_table(spark, "daily_revenue").select("order_date").distinct().count() == DAYS
    # The sensor waited for the backfill and did not repeat the restatement `restate` did for this landing.
    assert len(dagster_dev.runs(RESTATE_JOB)) == 1


@pytest.mark.daemon
def test_late_rows_on_five_days_are_restated_by_the_sensor_on_exactly_those_days(spark, dagster_dev, lake):
    root, _ = lake
    items, expected = three_corrected_and_two_late_days(spark, START + timedelta(days=40))
    before = snapshot(spark)
    ingested = land_batch(spark, items, next_batch_day())

    run = dagster_dev.wait_for_run(RESTATE_JOB, (LANDING_STATE_TAG, landing_state()))

    assert run["status"] == "SUCCESS"
    # One restatement, whichever sensor run picked the batch up: one commit per order table, on exactly the 5 days.
    assert_rewrote_exactly(spark, before, expected)
    quantities = {(r.order_id, r.order_item_id): r.quantity for r in read_table(spark, "fact_order_item").collect()}
    assert all(quantities[(r[0], r[1])] == r[6] for r in items)
    assert control.read_watermark(spark, late_data.PIPELINE).watermark_ts == ingested.replace(tzinfo=None)
    with instance_at(root / "dagster_dev_home") as instance:
        for table in ORDER_TABLES:
            for check in (UNIQUE_KEY, UP_TO_DATE, *([RECONCILES] if table != "stg_order_items" else [])):
                statuses = {d: latest_check_status(instance, table, check, d) for d in expected}
                assert statuses == dict.fromkeys(expected, "SUCCEEDED"), (table, check, statuses)
