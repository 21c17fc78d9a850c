"""What Dagster shows of the tables, day by day: each day's materialization carries that day's figures, and each
check's Partitions view colours every day from the results tied to that day's latest materialization."""

from datetime import date

import pytest
from dagster import AssetCheckKey, AssetKey, AssetRecordsFilter

from assets_pkg.generate import generate
from exact_backfills.backfill import BackfillRequest, run_backfill
from exact_backfills.checks import FINGERPRINT, RECONCILES, UNIQUE_KEY
from exact_backfills.cli import main
from exact_backfills.definitions import defs
from exact_backfills.partitions import days
from resources.delta_io import read_days, read_table
from resources.lake import table_path
from tests.support.late_batches import check_partition_statuses
from tests.support.orders import ORDERS

pytestmark = pytest.mark.slow  # builds a lake and runs backfills: minutes, not seconds

START, END = date(2025, 1, 1), date(2025, 1, 10)
DAY = date(2025, 1, 5)


@pytest.fixture(scope="module")
def built(spark, lake):
    _, instance = lake
    generate(spark, START, END, seed=3, rows_per_day=20)
    assert run_backfill(BackfillRequest(ORDERS, START, END), instance=instance, echo=lambda _: None)
    return instance


def test_each_days_materialization_carries_that_days_rows_and_files_not_the_runs(spark, built):
    rows_per_day = {
        r.order_date.isoformat(): r["count"]
        for r in read_table(spark, "fact_order_item").groupBy("order_date").count().collect()
    }
    records = built.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey("fact_order_item")), limit=100).records
    by_day = {r.partition_key: r.asset_materialization.metadata for r in records}
    assert set(by_day) == {d.isoformat() for d in days(START, END)}
    for day, metadata in by_day.items():
        assert metadata["rows_written"].value == rows_per_day[day], day
        assert metadata["files_added"].value == 1, day
        assert len(metadata["fingerprint"].value) == 64, day
    assert len({m["fingerprint"].value for m in by_day.values()}) == len(by_day), "each day has its own fingerprint"


def test_the_checks_that_gate_a_publish_are_declared_blocking_in_dagster():
    blocking = {(k.asset_key.to_user_string(), k.name) for k, spec in _check_specs().items() if spec.blocking}
    assert ("fact_order_item", UNIQUE_KEY) in blocking and ("daily_revenue", RECONCILES) in blocking
    assert not any(name == FINGERPRINT for _, name in blocking)


def _check_specs():
    graph = defs.resolve_asset_graph()
    return {key: graph.get_check_spec(key) for key in graph.asset_check_keys}


def test_a_duplicate_written_behind_the_pipelines_back_shows_its_day_failed_with_the_numbers(spark, built, capsys):
    row = read_days(spark, "fact_order_item", "order_date", [DAY]).limit(1)
    row.write.format("delta").mode("append").save(table_path("fact_order_item"))

    assert main(["check", "--asset", "fact_order_item", "--start", str(START), "--end", str(END)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL unique_key {DAY}: duplicate_rows=1" in out

    statuses = check_partition_statuses(built, "fact_order_item", UNIQUE_KEY)
    assert statuses == {d.isoformat(): "FAILED" if d == DAY else "SUCCEEDED" for d in days(START, END)}
    # Changed behind the pipeline's back: the day's content no longer matches what the pipeline wrote.
    assert check_partition_statuses(built, "fact_order_item", FINGERPRINT)[DAY.isoformat()] == "FAILED"
    failed = [
        r
        for r in built.event_log_storage.get_asset_check_execution_history(
            AssetCheckKey(AssetKey("fact_order_item"), UNIQUE_KEY), limit=100
        )
        if r.partition == DAY.isoformat()
    ]
    assert failed and failed[0].event.dagster_event.event_specific_data.metadata["duplicate_rows"].value == 1

    # Rebuilding the day publishes it afresh: every check passes on it again.
    assert run_backfill(
        BackfillRequest(ORDERS, DAY, DAY, select=["fact_order_item"]), instance=built, echo=lambda _: None
    )
    assert check_partition_statuses(built, "fact_order_item", UNIQUE_KEY)[DAY.isoformat()] == "SUCCEEDED"
