"""Late and corrected rows restate exactly the days they touch, in every table, and never get skipped.

The tests share one lake and run in file order: each lands a new batch on top of what the previous ones left.
"""

import shutil
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from dagster import AssetCheckKey, AssetKey
from pyspark.sql import functions as F
from pyspark.sql import types as T

from assets_pkg import landing, late_data
from assets_pkg.assets import DAY_COLUMN, PUBLISH_ORDER
from assets_pkg.backfill import run_backfill
from assets_pkg.checks import LATE_DATA
from assets_pkg.cli import main
from assets_pkg.generate import generate
from resources import control
from resources.delta_io import read_days, read_table
from tests.conftest import files_by_day, rows, versions

START, END = date(2025, 1, 1), date(2025, 2, 9)
ORDER_TABLES = ["stg_order_items", "fact_order_item", "daily_revenue", "customer_daily_features"]


class Lake:
    """The shared lake: the day the next batch lands, and the days built so far."""

    def __init__(self, last_batch: date):
        self.next_batch = last_batch + timedelta(days=1)

    def land(self, spark, items, dataset=landing.ORDER_ITEMS):
        """Land `items` (rows of the landing contract, ingested_at left None) as the next daily batch."""
        batch, self.next_batch = self.next_batch, self.next_batch + timedelta(days=1)
        ingested = datetime.combine(batch, datetime.min.time(), tzinfo=timezone.utc) + timedelta(hours=2)
        df = spark.createDataFrame(
            [(*r[:-1], ingested, batch) for r in items],
            T.StructType([*landing.SCHEMAS[dataset].fields, T.StructField("ingest_date", T.DateType())]),
        )
        landing.land({dataset: df})
        return batch, ingested


def corrections(spark, day, n):
    """`n` staged items of `day`, re-sent with one more unit and a later updated_at: a correction."""
    out = []
    for r in read_days(spark, "stg_order_items", "order_date", [day]).orderBy("order_id", "order_item_id").limit(n).collect():
        quantity = r.quantity + 1
        gross = (r.gross_amount / r.quantity * quantity).quantize(Decimal("0.01"))
        out.append((r.order_id, r.order_item_id, r.order_date, r.customer_id, r.product_id, r.channel, quantity, gross,
                    r.discount_amount, r.cost_amount, r.updated_at + timedelta(days=30), None))
    return out


def new_items(day, first_order_id, n):
    return [(first_order_id + i, 1, day, 7, 1, "web", 2, Decimal("20.00"), Decimal("1.00"), Decimal("12.00"),
             datetime.combine(day, datetime.min.time(), tzinfo=timezone.utc) + timedelta(hours=9), None) for i in range(n)]


def snapshot(spark):
    return {t: (len(versions(spark, t)), files_by_day(spark, t, DAY_COLUMN[t])) for t in PUBLISH_ORDER}


def assert_rewrote_exactly(spark, before, expected_days, tables=ORDER_TABLES):
    """One new commit in each of `tables`, rewriting exactly `expected_days` (a set, or a set per table); other
    tables, and other days' files, untouched."""
    after = snapshot(spark)
    for table in PUBLISH_ORDER:
        days_of_table = expected_days.get(table, set()) if isinstance(expected_days, dict) else expected_days
        n_before, files_before = before[table]
        n_after, files_after = after[table]
        if table not in tables:
            assert n_after == n_before, f"{table}: a table the change does not affect got a commit"
            continue
        assert n_after == n_before + 1, f"{table}: one commit for the restatement"
        for day in set(files_before) | set(files_after):
            old, new = files_before.get(day, set()), files_after.get(day, set())
            if date.fromisoformat(day) in days_of_table:
                assert not (old & new), f"{table} {day}: should have been rewritten"
            else:
                assert old == new, f"{table} {day}: a day outside the restatement was touched"


@pytest.fixture(scope="module")
def lake_state(spark, lake):
    _, instance = lake
    summary = generate(spark, START, END, seed=31, rows_per_day=30)
    built_end = date.fromisoformat(max(summary.batches))
    assert run_backfill(START, built_end, chunk_size=62, instance=instance, echo=lambda _: None)
    return Lake(built_end)


def test_restating_with_no_new_data_rewrites_nothing(spark, lake_state, capsys):
    before = snapshot(spark)
    assert main(["restate"]) == 0
    assert "nothing to restate" in capsys.readouterr().out
    assert_rewrote_exactly(spark, before, set(), tables=[])
    assert control.read_watermark(spark, late_data.PIPELINE).watermark_ts is not None


def test_corrections_on_three_old_days_and_late_rows_on_two_others_restate_exactly_those_five_days(spark, lake_state, capsys):
    corrected_days = [START + timedelta(days=3), START + timedelta(days=7), START + timedelta(days=12)]
    late_days = [START + timedelta(days=20), START + timedelta(days=25)]
    items = [r for d in corrected_days for r in corrections(spark, d, 2)]
    items += [r for i, d in enumerate(late_days) for r in new_items(d, 9_000_000 + 100 * i, 3)]
    batch, ingested = lake_state.land(spark, items)
    expected = set(corrected_days) | set(late_days)

    # The preview names the days, why, and the batch, before anything is written.
    found = late_data.detect(spark)
    assert set(found.order_days) == expected and not found.product_days and not found.outside
    assert all(found.order_days[d].changed == 2 for d in corrected_days)
    assert all(found.order_days[d].changed == 3 for d in late_days)
    assert main(["stale"]) == 0
    out = capsys.readouterr().out
    for day in expected:
        assert f"order tables {day}:" in out and str(batch) in out

    before = snapshot(spark)
    assert main(["restate"]) == 0
    out = capsys.readouterr().out
    assert "restated fact_order_item: 5 day(s)" in out
    assert_rewrote_exactly(spark, before, expected)
    assert control.read_watermark(spark, late_data.PIPELINE).watermark_ts == ingested.replace(tzinfo=None)
    assert main(["check", "--start", str(START), "--end", str(lake_state.next_batch - timedelta(days=1))]) == 0
    corrected = {(r[0], r[1]): r[6] for r in items}
    fact = {(r.order_id, r.order_item_id): r.quantity for r in read_table(spark, "fact_order_item").collect()}
    assert all(fact[key] == quantity for key, quantity in corrected.items())


def test_replaying_the_same_batch_changes_nothing(spark, lake_state):
    before = snapshot(spark)
    result = late_data.restate(spark)
    assert result.publications == {}
    assert_rewrote_exactly(spark, before, set(), tables=[])


def test_after_the_restatement_every_table_equals_a_from_scratch_build(spark, lake_state, tmp_path, monkeypatch):
    from resources.lake import lake_root

    restated = {t: rows(spark, t) for t in PUBLISH_ORDER}
    scratch = tmp_path / "scratch"
    shutil.copytree(lake_root() / "landing", scratch / "landing")
    monkeypatch.setenv("LAKE_ROOT", str(scratch))
    from dagster import DagsterInstance

    with DagsterInstance.ephemeral() as instance:
        assert run_backfill(START, lake_state.next_batch - timedelta(days=1), chunk_size=90, instance=instance, echo=lambda _: None)
    for table in PUBLISH_ORDER:
        assert rows(spark, table) == restated[table], f"{table} differs from a from-scratch build"


def test_a_correction_that_moves_an_item_to_another_day_restates_both_days(spark, lake_state):
    old_day, new_day = START + timedelta(days=5), START + timedelta(days=6)
    moved = [(*r[:2], new_day, *r[3:]) for r in corrections(spark, old_day, 1)]
    lake_state.land(spark, moved)
    before = snapshot(spark)
    result = late_data.restate(spark)
    assert set(result.detection.order_days) == {old_day, new_day}
    assert result.detection.order_days[old_day].moved_out == 1
    assert_rewrote_exactly(spark, before, {old_day, new_day})
    key = moved[0][:2]
    placed = read_table(spark, "fact_order_item").where(F.col("order_id") == key[0]).where(F.col("order_item_id") == key[1])
    assert [r.order_date for r in placed.collect()] == [new_day]


class Crash(RuntimeError):
    pass


def test_a_crash_between_the_writes_and_the_watermark_ends_in_reprocessing_never_in_skipped_rows(spark, lake_state):
    day = START + timedelta(days=15)
    _, ingested = lake_state.land(spark, new_items(day, 9_100_000, 2))
    watermark = control.read_watermark(spark, late_data.PIPELINE)

    def crash_after_staging(table, _):
        if table == "stg_order_items":
            raise Crash("killed after staging was written")

    with pytest.raises(Crash):
        late_data.restate(spark, on_publication=crash_after_staging)
    after_crash = control.read_watermark(spark, late_data.PIPELINE)
    assert after_crash.watermark_ts == watermark.watermark_ts and after_crash.pending_days == [day]

    def crash_before_watermark():
        raise Crash("killed before the watermark update")

    with pytest.raises(Crash):
        late_data.restate(spark, before_watermark=crash_before_watermark)
    assert control.read_watermark(spark, late_data.PIPELINE).pending_days == [day]

    # Staging already holds the rows, yet the day is rewritten again in every table: reprocessing, not skipping.
    before = snapshot(spark)
    result = late_data.restate(spark)
    assert result.detection.order_days[day].pending
    assert_rewrote_exactly(spark, before, {day})
    final = control.read_watermark(spark, late_data.PIPELINE)
    assert final.pending_days == [] and final.watermark_ts == ingested.replace(tzinfo=None)
    fact_keys = {r.order_id for r in read_days(spark, "fact_order_item", "order_date", [day]).collect()}
    assert {9_100_000, 9_100_001} <= fact_keys


def test_a_product_status_change_restates_the_later_days_and_an_old_day_reruns_identically(spark, lake_state):
    """Seed 001: the fact joins the product as of the order day, so an old day's re-run ignores today's status."""
    change_day = START + timedelta(days=30)
    fact = read_table(spark, "fact_order_item")
    unchanged_since = read_table(spark, "dim_product").groupBy("product_id").agg(F.max("valid_from").alias("latest"))
    product_id = (  # ordered before and after the change, with no other version after it
        fact.groupBy("product_id")
        .agg(F.min("order_date").alias("first"), F.max("order_date").alias("last"))
        .join(unchanged_since, "product_id")
        .where(F.col("first") < change_day).where(F.col("last") >= change_day).where(F.col("latest") < change_day)
        .orderBy("product_id").first().product_id
    )
    current = read_table(spark, "dim_product").where(F.col("product_id") == product_id).orderBy(F.col("valid_from").desc()).first()
    flipped = "PASSIVE" if current.status == "ACTIVE" else "ACTIVE"
    at = datetime.combine(change_day, datetime.min.time(), tzinfo=timezone.utc) + timedelta(hours=9)
    lake_state.land(spark, [(product_id, current.category, flipped, current.list_price, at, None)], landing.PRODUCTS)

    later_days = {r.order_date for r in fact.where(F.col("product_id") == product_id).where(F.col("order_date") >= change_day).select("order_date").distinct().collect()}
    found = late_data.detect(spark)
    assert set(found.product_days) == {change_day}
    assert set(found.order_days) == later_days

    old_day = max(r.order_date for r in fact.where(F.col("product_id") == product_id).where(F.col("order_date") < change_day).collect())
    old_rows = rows_of_day(spark, old_day)
    before = snapshot(spark)
    late_data.restate(spark)
    expected = {t: later_days for t in ORDER_TABLES} | {"dim_product": {change_day}}
    assert_rewrote_exactly(spark, before, expected, tables=PUBLISH_ORDER)
    statuses = {r.order_date: r.product_status for r in read_table(spark, "fact_order_item").where(F.col("product_id") == product_id).collect()}
    assert all(status == flipped for day, status in statuses.items() if day >= change_day)
    assert all(status == current.status for day, status in statuses.items() if day < change_day)

    assert run_backfill(old_day, old_day, echo=lambda _: None)
    assert rows_of_day(spark, old_day) == old_rows


def rows_of_day(spark, day):
    return sorted(tuple(r) for r in read_days(spark, "fact_order_item", "order_date", [day]).collect())


def test_rows_older_than_the_window_are_exceptions_until_a_manual_backfill(spark, lake_state, lake, monkeypatch, capsys):
    _, instance = lake
    monkeypatch.setenv("RESTATEMENT_WINDOW_DAYS", "30")
    old_day = START + timedelta(days=2)
    batch, _ = lake_state.land(spark, corrections(spark, old_day, 1))
    assert old_day < batch - timedelta(days=30)

    before = snapshot(spark)
    assert main(["restate"]) == 0
    assert f"late rows older than the restatement window on {old_day}" in capsys.readouterr().out
    assert_rewrote_exactly(spark, before, set(), tables=[])
    assert [r.day for r in control.open_exceptions(spark)] == [old_day]
    assert latest_late_data_check(instance, old_day) == "FAILED"

    assert run_backfill(old_day, old_day, instance=instance, echo=lambda _: None)
    assert control.open_exceptions(spark) == []
    assert latest_late_data_check(instance, old_day) == "SUCCEEDED"


def latest_late_data_check(instance, day):
    """Status of the newest late_data_outside_window result on `day`, as the UI's asset-check view shows it."""
    records = instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(AssetKey("stg_order_items"), LATE_DATA), limit=1000
    )
    return [r for r in records if r.partition == day.isoformat()][0].status.value
