"""A partition-range backfill launched as the UI launches it, run by the real daemon, in chunked runs."""

from datetime import date, timedelta

import pytest

from assets_pkg.definitions import defs
from assets_pkg.generate import generate
from resources.delta_io import read_table
from tests.conftest import TABLE_KEYS, duplicate_keys
from tests.dagster_ui import DagsterDev

START, DAYS, CHUNK = date(2025, 1, 1), 30, 10


@pytest.fixture(scope="module")
def dagster_dev(spark, lake):
    root, _ = lake
    generate(spark, START, START + timedelta(days=DAYS - 1), seed=5, rows_per_day=40)
    dev = DagsterDev(root / "dagster_dev_home", env={"LAKE_ROOT": str(root), "BACKFILL_MAX_PARTITIONS_PER_RUN": str(CHUNK)})
    try:
        dev.wait_until_up()
        yield dev
    finally:
        dev.stop()


@pytest.mark.daemon
def test_a_30_day_ui_backfill_of_every_asset_runs_in_chunks_and_leaves_one_row_per_key(spark, dagster_dev):
    days = [(START + timedelta(days=i)).isoformat() for i in range(DAYS)]
    every_asset = [k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()]
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
    assert len(runs) < DAYS // 2
    covered = {first + timedelta(days=i) for first, last in ranges for i in range((last - first).days + 1)}
    assert covered == {date.fromisoformat(d) for d in days}

    for table in TABLE_KEYS:
        df = read_table(spark, table)
        assert df.count() > 0, table
        assert duplicate_keys(spark, table) == 0, table
    assert read_table(spark, "daily_revenue").select("order_date").distinct().count() == DAYS
