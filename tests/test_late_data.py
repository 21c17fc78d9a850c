"""Late and corrected rows restate exactly the days they touch, in every table, and never get skipped.

The tests share one lake: each lands the batch it restates on top of what the others left, and none needs another to
have run.
"""

import json
import shutil
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from dagster import (
    AssetKey,
    AssetRecordsFilter,
    AutomationCondition,
    DagsterRunStatus,
    Definitions,
    RunsFilter,
    evaluate_automation_conditions,
)
from pyspark.sql import functions as F

from assets_pkg.generate import generate
from exact_backfills import landing, late_data
from exact_backfills.assets import publish_step
from exact_backfills.automation import landing_assets
from exact_backfills.backfill import BackfillRequest, observe_landing, run_backfill
from exact_backfills.checks import LATE_DATA, UP_TO_DATE
from exact_backfills.cli import main
from exact_backfills.dagster_names import PREVIEW_JOB, RESTATE_JOB, ROLLBACK_JOB
from exact_backfills.definitions import defs
from exact_backfills.partitions import days
from exact_backfills.rollback import version_before
from resources import audit, control
from resources.delta_io import read_days, read_table
from resources.lake import table_path
from resources.settings import settings
from resources.spark import spark_resource
from tests.support.lake import control_versions, rows
from tests.support.late_batches import (
    ORDER_TABLES,
    assert_rewrote_exactly,
    corrections,
    land_batch,
    latest_check_status,
    new_items,
    snapshot,
    three_corrected_and_two_late_days,
)
from tests.support.orders import (
    DAILY_REVENUE,
    DAY_COLUMN,
    DIM_PRODUCT,
    FACT_ORDER_ITEM,
    LANDING_ORDER_ITEMS,
    ORDER_ITEMS,
    ORDERS,
    PRODUCTS,
    PUBLISH_ORDER,
    QUARANTINE_ORDER_ITEMS,
    STG_ORDER_ITEMS,
)

pytestmark = pytest.mark.slow  # builds a lake and runs backfills: minutes, not seconds

START, END = date(2025, 1, 1), date(2025, 2, 9)


class Lake:
    """The shared lake: the day the next batch lands."""

    def __init__(self, last_batch: date):
        self.next_batch = last_batch + timedelta(days=1)

    def land(self, spark, items, dataset=ORDER_ITEMS):
        batch, self.next_batch = self.next_batch, self.next_batch + timedelta(days=1)
        return batch, land_batch(spark, items, batch, dataset)


class DagsterStaleness:
    """Dagster's own view of the landing's data versions: the days of stg_order_items that an automation condition
    `any_deps_match(data_version_changed())` would request, tick after tick."""

    def __init__(self, instance):
        self.instance, self.cursor = instance, None
        condition = AutomationCondition.any_deps_match(AutomationCondition.data_version_changed())
        watched = publish_step(ORDERS).map_asset_specs(
            lambda spec: (
                spec.replace_attributes(automation_condition=condition)
                if spec.key == AssetKey(STG_ORDER_ITEMS)
                else spec
            )
        )
        self.defs = Definitions(
            assets=[*landing_assets(ORDERS), watched], resources={"pyspark": spark_resource(settings())}
        )

    def changed_days(self) -> set[date]:
        result = evaluate_automation_conditions(self.defs, self.instance, cursor=self.cursor)
        self.cursor = result.cursor
        return {date.fromisoformat(k) for k in result.get_requested_partitions(AssetKey(STG_ORDER_ITEMS))}


def landing_versions(instance) -> dict[date, str]:
    """The latest observed data version of each day of the order item landing."""
    latest = {}
    for record in instance.fetch_observations(AssetKey(LANDING_ORDER_ITEMS), limit=10_000).records:  # newest first
        latest.setdefault(date.fromisoformat(record.partition_key), record.asset_observation.data_version)
    return latest


def published_freshness(capsys) -> dict:
    assert main(["metrics", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def stale_days(order_days: int) -> dict[str, int]:
    """What `metrics` reports per table written by a run when `order_days` days of orders are stale."""
    return {t: order_days if t in ORDER_TABLES else 0 for t in PUBLISH_ORDER}


@pytest.fixture(scope="module")
def lake_state(spark, lake):
    _, instance = lake
    summary = generate(spark, START, END, seed=31, rows_per_day=30)
    assert observe_landing(ORDERS, instance).success  # as the `generate` command does
    built_end = date.fromisoformat(max(summary.batches))
    assert run_backfill(
        BackfillRequest(ORDERS, START, built_end, chunk_size=62), instance=instance, echo=lambda _: None
    )
    late_data.restate(spark, ORDERS)  # reads every batch once, nothing to restate: the watermark every test starts from
    return Lake(built_end)


def test_restating_with_no_new_data_rewrites_nothing(spark, lake_state, capsys):
    before = snapshot(spark)
    assert main(["restate"]) == 0
    assert "nothing to restate" in capsys.readouterr().out
    assert_rewrote_exactly(spark, before, set(), tables=[])
    assert control.read_watermark(spark, ORDERS.name).watermark_ts is not None


def test_corrections_on_three_old_days_and_late_rows_on_two_others_restate_exactly_those_five_days(
    spark, lake, lake_state, capsys
):
    _, instance = lake
    dagster_view = DagsterStaleness(instance)
    assert dagster_view.changed_days() == set()
    versions_before = landing_versions(instance)
    assert len(versions_before) == (END - START).days + 1  # every landed day, observed as `generate` does
    items, expected = three_corrected_and_two_late_days(spark, START)
    batch, ingested = lake_state.land(spark, items)

    # The preview names the days, why, and the batch, before anything is written: on the terminal...
    found = late_data.detect(spark, ORDERS)
    staged = found.days[STG_ORDER_ITEMS]
    assert set(staged) == expected and not found.days[DIM_PRODUCT] and not found.outside
    assert sorted(staged[d].changed for d in expected) == [2, 2, 2, 3, 3]
    assert main(["stale"]) == 0
    out = capsys.readouterr().out
    assert f"{STG_ORDER_ITEMS}: {len(expected)} day(s) to restate" in out
    for day in expected:
        assert f"  {day}: " in out and str(batch) in out
    # `metrics` says how far each table is behind its landing: the days to restate, and the landed data's lag.
    behind = published_freshness(capsys)
    assert {a["asset"]: a["stale_days"] for a in behind["assets"]} == stale_days(5)
    assert behind["landing_lag_s"] > 0 and behind["newest_landed_batch"] == str(batch)
    # ... and in Dagster: a new data version on exactly those days of the landing, so Dagster's own automation
    # would request exactly those days downstream, and each order table's up_to_date_with_landing check fails on them.
    before = snapshot(spark)
    assert defs.resolve_job_def(PREVIEW_JOB).execute_in_process(instance=instance).success
    assert_rewrote_exactly(spark, before, set(), tables=[])
    observed = landing_versions(instance)
    assert {d for d, version in observed.items() if version != versions_before.get(d)} == expected
    assert dagster_view.changed_days() == expected
    untouched = START + timedelta(days=1)
    for table in ORDER_TABLES:
        assert {d: latest_check_status(instance, table, UP_TO_DATE, d) for d in expected} == dict.fromkeys(
            expected, "FAILED"
        )
        assert latest_check_status(instance, table, UP_TO_DATE, untouched) == "SUCCEEDED"

    assert main(["restate"]) == 0
    out = capsys.readouterr().out
    assert "restated fact_order_item: 5 day(s)" in out
    assert_rewrote_exactly(spark, before, expected)
    assert control.read_watermark(spark, ORDERS.name).watermark_ts == ingested.replace(tzinfo=None)
    assert main(["check", "--start", str(START), "--end", str(lake_state.next_batch - timedelta(days=1))]) == 0
    capsys.readouterr()
    caught_up = published_freshness(capsys)
    assert {a["asset"]: a["stale_days"] for a in caught_up["assets"]} == stale_days(0)
    assert caught_up["landing_lag_s"] == 0
    for table in ORDER_TABLES:
        assert {d: latest_check_status(instance, table, UP_TO_DATE, d) for d in expected} == dict.fromkeys(
            expected, "SUCCEEDED"
        )
    # The restatement observed the same versions: nothing is new to Dagster.
    assert dagster_view.changed_days() == set()
    corrected = {(r[0], r[1]): r[6] for r in items}
    fact = {(r.order_id, r.order_item_id): r.quantity for r in read_table(spark, "fact_order_item").collect()}
    assert all(fact[key] == quantity for key, quantity in corrected.items())


def content_of_days(spark, tables, days, version_of=None):
    """Each table's rows of `days` (at a Delta version when `version_of` gives one), by column name."""
    found = {}
    for table in tables:
        reader = spark.read.format("delta")
        if version_of:
            reader = reader.option("versionAsOf", version_of[table])
        df = reader.load(table_path(table)).where(F.col(DAY_COLUMN[table]).between(min(days), max(days))).drop("run_id")
        found[table] = sorted((r.asDict() for r in df.collect()), key=lambda row: repr(sorted(row.items())))
    return found


def test_rolling_the_fact_back_before_a_restatement_rolls_back_its_chunk_and_holds_the_days_until_released(
    spark, lake, lake_state, capsys
):
    _, instance = lake
    # A restatement of its own to roll back: corrections of two consecutive days, restated by `restate`'s run.
    corrected = [START + timedelta(days=10), START + timedelta(days=11)]
    lake_state.land(spark, [r for d in corrected for r in corrections(spark, d, 2)])
    assert main(["restate"]) == 0
    capsys.readouterr()
    restatement = instance.get_runs(RunsFilter(job_name=RESTATE_JOB, statuses=[DagsterRunStatus.SUCCESS]), limit=1)[0]
    restated = sorted(
        {r.partition for r in audit.read(spark, ORDERS.name).where(f"run_id = '{restatement.run_id}'").collect()}
    )
    assert restated == corrected
    a, b = restated[0], restated[-1]
    chunk = [
        t for t in [QUARANTINE_ORDER_ITEMS, *PUBLISH_ORDER] if version_before(spark, t, restatement.run_id) is not None
    ]
    assert {STG_ORDER_ITEMS, FACT_ORDER_ITEM} <= set(chunk) and DIM_PRODUCT not in chunk  # the batch had no products
    before_restatement = content_of_days(
        spark, chunk, restated, {t: version_before(spark, t, restatement.run_id) for t in chunk}
    )
    restated_content = content_of_days(spark, chunk, restated)
    rollback = [
        "rollback",
        "--asset",
        FACT_ORDER_ITEM,
        "--start",
        str(a),
        "--end",
        str(b),
        "--before-run",
        restatement.run_id,
    ]

    # The dry run says what each table of the chunk would hold, day by day, and writes nothing.
    before = snapshot(spark)
    assert main([*rollback, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {t} {d}: " in out for t in chunk for d in restated) and "dry run: nothing written" in out
    assert_rewrote_exactly(spark, before, set(), tables=[])

    # A mart alone, back to before the restatement, would no longer match the fact it is built from: refused, with
    # the days and numbers, and nothing written.
    mart = [
        DAILY_REVENUE,
        "--start",
        str(a),
        "--end",
        str(b),
        "--version",
        str(version_before(spark, DAILY_REVENUE, restatement.run_id)),
    ]
    assert main(["rollback", "--asset", *mart]) == 2  # refused
    out = capsys.readouterr().out
    assert "refused, nothing restored" in out and f"reconciles_with_upstream of {DAILY_REVENUE} on " in out, out
    assert_rewrote_exactly(spark, before, set(), tables=[])
    assert control.open_holds(spark, ORDERS.name) == []

    # The fact, and with it every table of the restatement's chunk, holds what it held before it, in one commit each;
    # no other day is written, and every check passes on the days it restored.
    assert main(rollback) == 0
    out = capsys.readouterr().out
    assert_rewrote_exactly(spark, before, set(restated), tables=[t for t in chunk if t in before])
    assert content_of_days(spark, chunk, restated) == before_restatement
    assert main(["check", "--start", str(a), "--end", str(b)]) == 0, capsys.readouterr().out
    capsys.readouterr()
    # Dagster shows each day's latest materialization as the rollback's, saying what it restored, and the days held.
    latest = instance.fetch_materializations(
        AssetRecordsFilter(AssetKey(FACT_ORDER_ITEM), asset_partitions=[a.isoformat()]), limit=1
    ).records[0]
    assert latest.run_id != restatement.run_id and "restored_to_version" in latest.asset_materialization.metadata
    assert instance.get_run_by_id(latest.run_id).job_name == ROLLBACK_JOB
    assert {h.day for h in control.open_holds(spark, ORDERS.name)} == set(days(a, b))

    # Held: a restatement does not apply the batch again, `stale` says who holds the days and why, a backfill is
    # refused.
    before = snapshot(spark)
    assert main(["restate"]) == 0
    assert main(["stale"]) == 0
    out = capsys.readouterr().out
    assert f"HELD {a} held since" in out and restatement.run_id in out
    assert not run_backfill(BackfillRequest(ORDERS, a, b), instance=instance, echo=lambda _: None)
    assert_rewrote_exactly(spark, before, set(), tables=[])

    # Released: the days are published again from the landing, the batch applied, and no longer held.
    assert main(["release", "--start", str(a), "--end", str(b)]) == 0
    assert content_of_days(spark, chunk, restated) == restated_content
    assert control.open_holds(spark, ORDERS.name) == []


def test_replaying_the_same_batch_changes_nothing(spark, lake_state):
    late_data.restate(spark, ORDERS)  # every batch landed so far read and published: the replay below reads them again
    before = snapshot(spark)
    watermark_commits = control_versions(spark, control.WATERMARK_TABLE)
    result = late_data.restate(spark, ORDERS)
    assert result.detection.batches_read[ORDER_ITEMS.name], "the reprocess window re-reads the batch"
    assert result.publications == {}
    assert_rewrote_exactly(spark, before, set(), tables=[])
    assert control_versions(spark, control.WATERMARK_TABLE) == watermark_commits, (
        "nothing new: not even the watermark commits"
    )


def test_a_restatement_stages_from_staging_and_the_new_batches_without_reading_the_history(spark, lake_state, tmp_path):
    """With every earlier batch moved out of the landing, a correction still restates its day whole: the day's other
    items come from staging, not from a rescan of the landing. A row of the batch breaking the contract is
    quarantined on its day with its reason, once, however often its batch is read again."""
    day = START + timedelta(days=9)
    corrected, broken = corrections(spark, day, 2)
    broken = (*broken[:6], -1, *broken[7:])  # a negative quantity
    batch, _ = lake_state.land(spark, [corrected, broken])
    staged_before = {
        (r.order_id, r.order_item_id): r.quantity
        for r in read_days(spark, STG_ORDER_ITEMS, "order_date", [day]).collect()
    }
    history = tmp_path / "history"
    history.mkdir()
    older = [p for p in landing.batch_dirs(ORDER_ITEMS) if landing.batch_name(p) != batch.isoformat()]
    for p in older:
        shutil.move(p.path, history / p.name)
    try:
        result = late_data.restate(spark, ORDERS)
    finally:
        for p in older:
            shutil.move(history / p.name, p.path)
    assert set(result.detection.days[STG_ORDER_ITEMS]) == {day}
    staged_after = {
        (r.order_id, r.order_item_id): r.quantity
        for r in read_days(spark, STG_ORDER_ITEMS, "order_date", [day]).collect()
    }
    assert staged_after == {**staged_before, corrected[:2]: corrected[6]}
    assert all(o.passed for p in result.publications.values() for o in p.outcomes if o.blocking)
    assert quarantined_from(spark, day, batch) == [(*broken[:2], "negative_or_null_quantity")]

    # The next batch restates the day again and reads that batch again (the reprocess window): still one row.
    lake_state.land(spark, corrections(spark, day, 3)[2:])
    assert batch.isoformat() in late_data.restate(spark, ORDERS).detection.batches_read[ORDER_ITEMS.name]
    assert quarantined_from(spark, day, batch) == [(*broken[:2], "negative_or_null_quantity")]


def quarantined_from(spark, day, batch):
    rows = read_days(spark, QUARANTINE_ORDER_ITEMS, "quarantine_day", [day]).where(F.col("ingest_date") == batch)
    return [(r.order_id, r.order_item_id, r.reason) for r in rows.collect()]


def test_a_correction_that_moves_an_item_to_another_day_restates_both_days(spark, lake_state):
    old_day, new_day = START + timedelta(days=5), START + timedelta(days=6)
    moved = [(*r[:2], new_day, *r[3:]) for r in corrections(spark, old_day, 1)]
    lake_state.land(spark, moved)
    before = snapshot(spark)
    result = late_data.restate(spark, ORDERS)
    assert set(result.detection.days[STG_ORDER_ITEMS]) == {old_day, new_day}
    assert result.detection.days[STG_ORDER_ITEMS][old_day].moved_out == 1
    assert_rewrote_exactly(spark, before, {old_day, new_day})
    key = moved[0][:2]
    placed = (
        read_table(spark, "fact_order_item").where(F.col("order_id") == key[0]).where(F.col("order_item_id") == key[1])
    )
    assert [r.order_date for r in placed.collect()] == [new_day]


class Crash(RuntimeError):
    pass


def test_a_crash_between_the_writes_and_the_watermark_ends_in_reprocessing_never_in_skipped_rows(spark, lake_state):
    day = START + timedelta(days=15)
    _, ingested = lake_state.land(spark, new_items(day, 9_100_000, 2))
    watermark = control.read_watermark(spark, ORDERS.name)

    def crash_after_staging(table, _):
        if table == "stg_order_items":
            raise Crash("killed after staging was written")

    with pytest.raises(Crash):
        late_data.restate(spark, ORDERS, on_publication=crash_after_staging)
    after_crash = control.read_watermark(spark, ORDERS.name)
    assert after_crash.watermark_ts == watermark.watermark_ts and after_crash.pending_days == [day]

    def crash_before_watermark():
        raise Crash("killed before the watermark update")

    with pytest.raises(Crash):
        late_data.restate(spark, ORDERS, before_watermark=crash_before_watermark)
    assert control.read_watermark(spark, ORDERS.name).pending_days == [day]

    # Staging already holds the rows, yet the day is rewritten again in every table: reprocessing, not skipping.
    before = snapshot(spark)
    result = late_data.restate(spark, ORDERS)
    assert result.detection.days[STG_ORDER_ITEMS][day].pending
    assert_rewrote_exactly(spark, before, {day})
    final = control.read_watermark(spark, ORDERS.name)
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
        .where(F.col("first") < change_day)
        .where(F.col("last") >= change_day)
        .where(F.col("latest") < change_day)
        .orderBy("product_id")
        .first()
        .product_id
    )
    current = (
        read_table(spark, "dim_product")
        .where(F.col("product_id") == product_id)
        .orderBy(F.col("valid_from").desc())
        .first()
    )
    flipped = "PASSIVE" if current.status == "ACTIVE" else "ACTIVE"
    at = datetime.combine(change_day, datetime.min.time(), tzinfo=UTC) + timedelta(hours=9)
    lake_state.land(spark, [(product_id, current.category, flipped, current.list_price, at, None)], PRODUCTS)

    later_days = {
        r.order_date
        for r in fact.where(F.col("product_id") == product_id)
        .where(F.col("order_date") >= change_day)
        .select("order_date")
        .distinct()
        .collect()
    }
    found = late_data.detect(spark, ORDERS)
    assert set(found.days[DIM_PRODUCT]) == {change_day}
    # Staging's rows do not change: the product version makes stale the later days that read it, and only those.
    assert set(found.days[FACT_ORDER_ITEM]) == later_days and not found.days[STG_ORDER_ITEMS]

    old_day = max(
        r.order_date
        for r in fact.where(F.col("product_id") == product_id).where(F.col("order_date") < change_day).collect()
    )
    old_rows = rows_of_day(spark, old_day)
    before = snapshot(spark)
    late_data.restate(spark, ORDERS)
    expected = {t: later_days for t in ORDER_TABLES if t != STG_ORDER_ITEMS} | {"dim_product": {change_day}}
    assert_rewrote_exactly(spark, before, expected, tables=[t for t in PUBLISH_ORDER if t != STG_ORDER_ITEMS])
    statuses = {
        r.order_date: r.product_status
        for r in read_table(spark, "fact_order_item").where(F.col("product_id") == product_id).collect()
    }
    assert all(status == flipped for day, status in statuses.items() if day >= change_day)
    assert all(status == current.status for day, status in statuses.items() if day < change_day)

    assert run_backfill(BackfillRequest(ORDERS, old_day, old_day), echo=lambda _: None)
    assert rows_of_day(spark, old_day) == old_rows


def rows_of_day(spark, day):
    return sorted((r.asDict() for r in read_days(spark, "fact_order_item", "order_date", [day]).collect()), key=repr)


def test_rows_older_than_the_window_are_exceptions_until_a_manual_backfill(
    spark, lake_state, lake, monkeypatch, capsys
):
    _, instance = lake
    monkeypatch.setenv("RESTATEMENT_WINDOW_DAYS", "30")
    old_day = START + timedelta(days=2)
    batch, _ = lake_state.land(spark, corrections(spark, old_day, 1))
    assert old_day < batch - timedelta(days=30)

    before = snapshot(spark)
    assert main(["restate"]) == 0
    assert f"late rows older than the restatement window on {old_day}" in capsys.readouterr().out
    assert_rewrote_exactly(spark, before, set(), tables=[])
    assert [r.day for r in control.open_exceptions(spark, ORDERS.name)] == [old_day]
    assert latest_check_status(instance, STG_ORDER_ITEMS, LATE_DATA, old_day) == "FAILED"
    # Replayed, the batch is read again and its old rows found again: the open exception already says so.
    commits = {t: control_versions(spark, t) for t in (control.EXCEPTIONS_TABLE, control.WATERMARK_TABLE)}
    assert late_data.restate(spark, ORDERS).detection.outside[STG_ORDER_ITEMS].keys() == {old_day}
    assert {t: control_versions(spark, t) for t in commits} == commits

    assert run_backfill(BackfillRequest(ORDERS, old_day, old_day), instance=instance, echo=lambda _: None)
    assert control.open_exceptions(spark, ORDERS.name) == []
    assert latest_check_status(instance, STG_ORDER_ITEMS, LATE_DATA, old_day) == "SUCCEEDED"


def test_a_restated_lake_equals_a_from_scratch_build_on_the_same_landing(spark, lake_state, tmp_path, monkeypatch):
    from resources.lake import lake_root

    # Its own late batch: corrections of two days, an item moved to the next day, two new items; restated on whatever
    # the lake holds.
    corrected = [r for d in (START + timedelta(days=20), START + timedelta(days=21)) for r in corrections(spark, d, 1)]
    moved = [(*r[:2], START + timedelta(days=24), *r[3:]) for r in corrections(spark, START + timedelta(days=23), 1)]
    lake_state.land(spark, [*corrected, *moved, *new_items(START + timedelta(days=25), 9_200_000, 2)])
    assert set(late_data.restate(spark, ORDERS).detection.days[STG_ORDER_ITEMS]) >= {START + timedelta(days=24)}
    restated = {t: rows(spark, t) for t in COMPARED}
    scratch = tmp_path / "scratch"
    shutil.copytree(Path(lake_root()) / "landing", scratch / "landing")
    monkeypatch.setenv("LAKE_ROOT", str(scratch))
    from dagster import DagsterInstance

    with DagsterInstance.ephemeral() as instance:
        assert run_backfill(
            BackfillRequest(ORDERS, START, lake_state.next_batch - timedelta(days=1), chunk_size=90),
            instance=instance,
            echo=lambda _: None,
        )
    for table in COMPARED:
        assert rows(spark, table) == restated[table], f"{table} differs from a from-scratch build"


COMPARED = [*PUBLISH_ORDER, QUARANTINE_ORDER_ITEMS]
