"""The evidence a backfill leaves: per-partition checks, quarantine, audit, report, rollback."""

import json
from datetime import date

import pytest
from dagster import RunRequest, build_sensor_context
from pyspark.sql import functions as F

from assets_pkg.generate import generate
from exact_backfills import checks, landing
from exact_backfills.automation import landing_state
from exact_backfills.backfill import Backfilled, BackfillRequest, run_backfill
from exact_backfills.checks import day_contents
from exact_backfills.cli import main
from exact_backfills.definitions import defs
from exact_backfills.location import definitions_of
from exact_backfills.partitions import days
from resources import audit
from resources.delta_io import read_days, read_table
from resources.lake import table_path
from tests.support.lake import files_by_day, versions
from tests.support.late_batches import check_partition_statuses
from tests.support.orders import BY_NAME, ORDER_ITEMS, ORDERS, PUBLISH_ORDER, downstream

# The sensor as the code location defines it, called as its tick calls it.
late_data_sensor = definitions_of(ORDERS).resolve_sensor_def("late_data_sensor")

pytestmark = pytest.mark.slow  # builds a lake and runs backfills: minutes, not seconds

START, END = date(2025, 1, 1), date(2025, 1, 12)
BUILT_END = date(2025, 1, 27)
DAY = date(2025, 1, 5)


@pytest.fixture(scope="module")
def built(spark, lake):
    _, instance = lake
    summary = generate(spark, START, END, seed=21, rows_per_day=40, bad_rate=0.05)
    assert summary.bad_rows > 0
    # Through the last landed batch: a row without a usable order_date is quarantined on its batch's day.
    assert max(summary.batches) == BUILT_END.isoformat()
    assert run_backfill(
        BackfillRequest(ORDERS, START, BUILT_END, chunk_size=27), instance=instance, echo=lambda _: None
    )
    return instance


def inject_duplicate(spark, table, day):
    """Behind the pipeline's back: append a copy of one row of `day`."""
    row = read_days(spark, table, "order_date", [day]).limit(1)
    row.write.format("delta").mode("append").save(table_path(table))
    return row.first()


def test_every_landed_key_is_in_the_fact_or_in_quarantine_with_a_reason(spark, built):
    versions_ = landing.read_landing(spark, ORDER_ITEMS)
    keys = ["order_id", "order_item_id"]
    landed = versions_.where("order_id IS NOT NULL AND order_item_id IS NOT NULL").select(*keys).distinct()
    quarantined = read_table(spark, "quarantine_order_items")
    accounted = read_table(spark, "fact_order_item").select(*keys).union(quarantined.select(*keys))
    assert landed.join(accounted, keys, "left_anti").count() == 0
    # Rows without a key cannot be matched by key: each of them is in quarantine, with its file.
    assert (
        versions_.where("order_id IS NULL OR order_item_id IS NULL").count()
        == quarantined.where("reason = 'null_key'").count()
        > 0
    )
    assert quarantined.where("reason IS NULL OR source_file IS NULL OR run_id IS NULL").count() == 0
    reasons = {r.reason for r in quarantined.select("reason").distinct().collect()}
    assert {"null_key", "negative_or_null_quantity", "negative_or_null_amount"} <= reasons


def test_every_check_shows_every_day_of_the_backfill_as_passed(built):
    expected = {day.isoformat(): "SUCCEEDED" for day in days(START, BUILT_END)}
    for table in PUBLISH_ORDER:
        for check in checks.names(BY_NAME[table]):
            assert check_partition_statuses(built, table, check) == expected, (table, check)


def test_the_audit_trail_has_one_row_per_run_asset_and_day(spark, built):
    rows = audit.read(spark, ORDERS.name).where("operation = 'backfill'")
    assert rows.groupBy("run_id", "asset", "partition").count().where("count > 1").count() == 0
    per_asset = {r.asset: r.n for r in rows.groupBy("asset").agg(F.countDistinct("partition").alias("n")).collect()}
    assert per_asset == {t: len(days(START, BUILT_END)) for t in PUBLISH_ORDER}
    assert rows.where("fingerprint IS NULL AND rows_written > 0").count() == 0
    assert rows.where("asset = 'stg_order_items' AND source_watermark IS NULL").count() == 0


def test_a_duplicate_behind_the_pipelines_back_fails_check_naming_day_and_key_and_rollback_restores_it(
    spark, built, capsys
):
    table = "fact_order_item"
    fingerprint_before = day_contents(read_table(spark, table), "order_date")
    version_before = versions(spark, table)[0]
    dup = inject_duplicate(spark, table, DAY)

    assert main(["check", "--asset", table, "--start", str(START), "--end", str(END)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL unique_key {DAY}" in out
    assert f"order_id={dup.order_id}, order_item_id={dup.order_item_id}" in out
    # The failed check run wrote nothing: late_data_sensor has nothing to run again.
    request = late_data_sensor(build_sensor_context(instance=built, definitions=defs, cursor=landing_state(ORDERS)))
    assert not isinstance(request, RunRequest), request.tags

    assert (
        main(["report", "--asset", table, "--start", str(START), "--end", str(END), "--version", str(version_before)])
        == 1
    )
    out = capsys.readouterr().out
    assert out.count("MISMATCH") == 1 and f"{DAY} rows=" in out.split("MISMATCH")[0].splitlines()[-1]

    # A version the table never had: one line giving its history's range, nothing written.
    assert main(["rollback", "--asset", table, "--start", str(DAY), "--end", str(DAY), "--version", "999"]) == 2
    assert f"version 999 is not in {table}'s history: its versions are 0.." in capsys.readouterr().err
    files_before = files_by_day(spark, table, "order_date")
    assert (
        main(["rollback", "--asset", table, "--start", str(DAY), "--end", str(DAY), "--version", str(version_before)])
        == 0
    )
    assert day_contents(read_table(spark, table), "order_date") == fingerprint_before
    files_after = files_by_day(spark, table, "order_date")
    assert all(files_after[d] == files_before[d] for d in files_before if d != DAY.isoformat())
    assert main(["check", "--asset", table, "--start", str(START), "--end", str(END)]) == 0
    assert audit.read(spark, ORDERS.name).where(f"operation = 'rollback' AND asset = '{table}'").count() == 1
    # The day is held since the rollback; releasing it publishes it again from the landing: the same rows.
    assert main(["release", "--start", str(DAY), "--end", str(DAY)]) == 0
    assert day_contents(read_table(spark, table), "order_date") == fingerprint_before


def test_a_blocking_failure_publishes_nothing_and_stops_the_downstream_partitions(spark, built, capsys):
    dup = inject_duplicate(spark, "stg_order_items", DAY)
    before = {t: versions(spark, t)[0] for t in downstream({"fact_order_item"})}

    refused = run_backfill(
        BackfillRequest(ORDERS, START, END, select=["fact_order_item"], chunk_size=31), instance=built
    )
    assert refused == Backfilled(False, refused=True) and refused.exit_code == 2
    out = capsys.readouterr().out
    assert f"unique_key of fact_order_item on {DAY}" in out and "nothing written in any of" in out
    assert f"order_id={dup.order_id}, order_item_id={dup.order_item_id}" in out
    # Nothing of the range was published, in the failing table or downstream of it.
    assert {t: versions(spark, t)[0] for t in before} == before
    runs = built.get_run_records()
    latest = runs[0].dagster_run.run_id
    materialized = {
        e.dagster_event.asset_key.to_user_string()
        for e in built.all_logs(latest)
        if e.dagster_event and e.dagster_event.is_step_materialization
    }
    assert materialized.isdisjoint(downstream({"fact_order_item"}))

    stg_version = versions(spark, "stg_order_items")[0]
    assert (
        main(
            [
                "rollback",
                "--asset",
                "stg_order_items",
                "--start",
                str(DAY),
                "--end",
                str(DAY),
                "--version",
                str(stg_version - 1),
            ]
        )
        == 0
    )


def test_metrics_report_p95_runtime_duplicates_mismatches_and_how_far_each_table_is_behind_its_landing(built, capsys):
    assert main(["metrics"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"landing: newest batch {BUILT_END}, newest day {END}; watermark - (never restated)")
    for table in PUBLISH_ORDER:
        assert table in out
    assert main(["metrics", "--json"]) == 0
    found = {m["asset"]: m for m in json.loads(capsys.readouterr().out)["assets"]}
    assert set(found) == set(PUBLISH_ORDER)
    assert found["fact_order_item"]["newest_published_day"] == END.isoformat()
    assert all(m["p95_run_s"] > 0 and m["runs"] >= 1 for m in found.values())
