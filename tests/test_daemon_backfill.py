"""What users do in the UI, with a real webserver and daemon: a partition-range backfill runs in chunked runs; a
late batch is restated by the sensor. The tests share the lake and run in file order."""

from datetime import date, datetime, timedelta, timezone

import pytest
from pyspark.sql import types as T

from assets_pkg import landing
from assets_pkg.automation import RESTATE_JOB, landing_state
from assets_pkg.definitions import defs
from assets_pkg.generate import generate
from resources.delta_io import read_days, read_table
from tests.conftest import TABLE_KEYS, duplicate_keys, versions
from tests.dagster_ui import DagsterDev

START, DAYS, CHUNK = date(2025, 1, 1), 30, 15
ORDER_TABLES = ["stg_order_items", "fact_order_item", "daily_revenue", "customer_daily_features"]


@pytest.fixture(scope="module")
def dagster_dev(spark, lake):
    root, _ = lake
    generate(spark, START, START + timedelta(days=DAYS - 1), seed=5, rows_per_day=40)
    dev = DagsterDev(root / "dagster_dev_home", env={"LAKE_ROOT": str(root), "BACKFILL_MAX_PARTITIONS_PER_RUN": str(CHUNK), "LATE_DATA_SENSOR_INTERVAL_S": "5"})
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


@pytest.mark.daemon
def test_a_late_batch_is_restated_by_the_sensor_in_every_table(spark, dagster_dev):
    day = START + timedelta(days=4)
    old = read_days(spark, "stg_order_items", "order_date", [day]).orderBy("order_id").first()
    batch = date.fromisoformat(max(landing.batch_name(p) for p in landing.batch_dirs(landing.ORDER_ITEMS))) + timedelta(days=1)
    ingested = datetime.combine(batch, datetime.min.time(), tzinfo=timezone.utc)
    correction = old.asDict() | {"quantity": old.quantity + 1, "updated_at": ingested, "ingested_at": ingested, "ingest_date": batch}
    schema = T.StructType([*landing.ORDER_ITEM_SCHEMA.fields, T.StructField("ingest_date", T.DateType())])
    commits_before = {t: len(versions(spark, t)) for t in ORDER_TABLES}
    landing.land({landing.ORDER_ITEMS: spark.createDataFrame([tuple(correction[f] for f in schema.fieldNames())], schema)})

    run = dagster_dev.wait_for_run(RESTATE_JOB, ("exact_backfills/landing_state", landing_state()))

    assert run["status"] == "SUCCESS"
    fact = read_days(spark, "fact_order_item", "order_date", [day]).where(f"order_id = {old.order_id} AND order_item_id = {old.order_item_id}")
    assert [r.quantity for r in fact.collect()] == [old.quantity + 1]
    # One restatement of one day, whichever sensor run picked the batch up: one commit per order table.
    assert {t: len(versions(spark, t)) for t in ORDER_TABLES} == {t: n + 1 for t, n in commits_before.items()}
