"""A run publishes its whole graph or nothing: a blocking check failing in any table writes nothing in any table;
a failure between commits says which tables hold the days, shows the others as behind, and the days are run again;
each table's days are recorded in Dagster as soon as it is committed, while the next table commits."""

import dataclasses
import json
import threading
from datetime import date
from pathlib import Path

import pytest
from dagster import AssetKey, RunRequest, build_sensor_context

from assets_pkg.generate import generate
from exact_backfills import publish as publishing
from exact_backfills import recording
from exact_backfills.automation import landing_state
from exact_backfills.backfill import Backfilled, BackfillRequest, run_backfill, run_checks
from exact_backfills.checks import UP_TO_DATE
from exact_backfills.dagster_names import ALL_ASSETS_JOB, PUBLISHED_TAG, REPAIR_OF_TAG
from exact_backfills.definitions import defs
from exact_backfills.location import definitions_of
from exact_backfills.partitions import days
from exact_backfills.publish import Change, Operation, Refused, RunInfo, publish
from exact_backfills.write_path import commit as committing
from tests.support.lake import rows, versions
from tests.support.late_batches import latest_check_status
from tests.support.orders import (
    BY_NAME,
    DAILY_REVENUE,
    FACT_ORDER_ITEM,
    ORDERS,
    PUBLISH_ORDER,
    QUARANTINE_ORDER_ITEMS,
    STG_ORDER_ITEMS,
    downstream,
    with_side_tables,
)

# The sensor as the code location defines it, called as its tick calls it.
late_data_sensor = definitions_of(ORDERS).resolve_sensor_def("late_data_sensor")

pytestmark = pytest.mark.slow  # builds a lake and runs backfills: minutes, not seconds

START, END = date(2025, 1, 1), date(2025, 1, 8)
TABLES = [*PUBLISH_ORDER, QUARANTINE_ORDER_ITEMS]


@pytest.fixture(scope="module")
def built(spark, lake):
    _, instance = lake
    generate(spark, START, END, seed=5, rows_per_day=8, bad_rate=0.1)
    assert run_backfill(BackfillRequest(ORDERS, START, END), instance=instance, echo=lambda _: None)
    return instance


def content(spark):
    return {t: rows(spark, t) for t in TABLES}


def test_a_blocking_failure_in_a_mart_writes_nothing_in_any_table_of_the_run(spark, built, monkeypatch):
    before = {t: versions(spark, t)[0] for t in TABLES}

    build = BY_NAME[DAILY_REVENUE].build

    def revenue_with_a_duplicate(spark, days_, read):
        revenue = build(spark, days_, read)
        return revenue.unionByName(revenue.limit(1))

    monkeypatch.setitem(
        BY_NAME, DAILY_REVENUE, dataclasses.replace(BY_NAME[DAILY_REVENUE], build=revenue_with_a_duplicate)
    )
    change = Change(Operation.BACKFILL, {t: days(START, END) for t in PUBLISH_ORDER})
    with pytest.raises(Refused) as failed:
        publish(spark, ORDERS, change, RunInfo("test-run"))
    assert list(failed.value.failing) == [DAILY_REVENUE]
    assert "unique_key of daily_revenue on" in str(failed.value) and "nothing written in any of" in str(failed.value)
    # Staging and the fact passed their checks, and were not published either.
    assert {t: versions(spark, t)[0] for t in TABLES} == before


def _conflict_on_the_fact(monkeypatch) -> None:
    commit = committing.overwrite_days

    def conflict_on_the_fact(df, table, *args, **kwargs):
        if table == FACT_ORDER_ITEM:
            raise RuntimeError("ConcurrentAppendException: files were added to the table by a concurrent update")
        return commit(df, table, *args, **kwargs)

    monkeypatch.setattr(committing, "overwrite_days", conflict_on_the_fact)


def test_a_failure_between_commits_names_what_was_committed_and_the_days_are_run_again(spark, built, monkeypatch):
    """A change of a few days commits its tables at once: when the fact's commit fails, every other table is
    committed, and the fact alone is named as not committed."""
    instance = built
    expected = content(spark)
    a, b = date(2025, 1, 3), date(2025, 1, 5)
    _conflict_on_the_fact(monkeypatch)
    said = []
    assert run_backfill(BackfillRequest(ORDERS, a, b), instance=instance, echo=said.append) == Backfilled(
        False
    )  # failed, not refused
    monkeypatch.undo()
    out = "\n".join(said)
    assert "failed after committing quarantine_order_items (" in out and "stg_order_items (version" in out
    assert all(f"{t} (version" in out for t in downstream({FACT_ORDER_ITEM}) if t != FACT_ORDER_ITEM), out
    assert f"not committed: {FACT_ORDER_ITEM} (RuntimeError" in out
    assert "ConcurrentAppendException" in out and f"{a}..{b} is published in the tables named above only" in out
    failed = instance.get_runs(limit=1)[0]
    assert failed.tags[PUBLISHED_TAG] == "partly"
    # Dagster shows staging's days as written by the failed run, and the fact's days as behind.
    latest = instance.get_latest_materialization_event(AssetKey(STG_ORDER_ITEMS))
    assert latest.run_id == failed.run_id
    assert {latest_check_status(instance, FACT_ORDER_ITEM, UP_TO_DATE, d) for d in days(a, b)} == {"FAILED"}

    request = late_data_sensor(build_sensor_context(instance=instance, definitions=defs, cursor=landing_state(ORDERS)))
    assert isinstance(request, RunRequest) and request.job_name == ALL_ASSETS_JOB
    assert request.tags[REPAIR_OF_TAG] == failed.run_id
    assert (request.tags["dagster/asset_partition_range_start"], request.tags["dagster/asset_partition_range_end"]) == (
        str(a),
        str(b),
    )
    repaired = defs.resolve_job_def(ALL_ASSETS_JOB).execute_in_process(
        instance=instance, tags=request.tags, raise_on_error=False
    )
    assert repaired.success
    assert content(spark) == expected  # the days hold what they held: staging's rows were already the same
    assert {latest_check_status(instance, FACT_ORDER_ITEM, UP_TO_DATE, d) for d in days(a, b)} == {"SUCCEEDED"}
    result, _ = run_checks(ORDERS, START, END, PUBLISH_ORDER, instance=instance)
    assert result.success
    # Repaired once: the sensor does not run it again.
    unchanged_landing = build_sensor_context(instance=instance, definitions=defs, cursor=landing_state(ORDERS))
    assert not isinstance(late_data_sensor(unchanged_landing), RunRequest)


def test_committing_one_table_after_the_other_no_commit_starts_after_a_failed_one(spark, built, monkeypatch):
    """A change of many days commits its tables in the graph's order: when the fact's commit fails, the tables before
    it are committed and none after it, and running the same days again publishes them all."""
    expected = content(spark)
    a, b = date(2025, 1, 3), date(2025, 1, 5)
    monkeypatch.setattr(publishing, "at_once", lambda change, calendar: False)
    _conflict_on_the_fact(monkeypatch)
    with pytest.raises(publishing.PartlyPublished) as failed:
        publish(
            spark, ORDERS, Change(Operation.BACKFILL, {t: days(a, b) for t in PUBLISH_ORDER}), RunInfo("one-by-one")
        )
    before_the_fact = PUBLISH_ORDER[: PUBLISH_ORDER.index(FACT_ORDER_ITEM)]
    assert set(failed.value.commits) == set(with_side_tables(before_the_fact))
    assert failed.value.not_committed == downstream({FACT_ORDER_ITEM})
    monkeypatch.undo()
    assert run_backfill(BackfillRequest(ORDERS, a, b), instance=built, echo=lambda _: None)
    assert content(spark) == expected


def test_a_tables_days_are_recorded_in_dagster_while_the_next_table_is_committed(spark, built, monkeypatch):
    instance = built
    expected = content(spark)
    commit, record = committing.overwrite_days, recording.publication_events
    fact_committing = threading.Event()
    staging_recorded_during_the_facts_commit: list[bool] = []

    def fact(df, table, *args, **kwargs):
        if table == FACT_ORDER_ITEM:
            fact_committing.set()
        return commit(df, table, *args, **kwargs)

    def staging_waits_for_the_facts_commit(context, table, *args, **kwargs):
        if table == STG_ORDER_ITEMS:  # one after the other, the fact's commit would never start
            staging_recorded_during_the_facts_commit.append(fact_committing.wait(timeout=120))
        yield from record(context, table, *args, **kwargs)

    monkeypatch.setattr(committing, "overwrite_days", fact)
    monkeypatch.setattr(recording, "publication_events", staging_waits_for_the_facts_commit)
    assert run_backfill(
        BackfillRequest(ORDERS, date(2025, 1, 2), date(2025, 1, 3)), instance=instance, echo=lambda _: None
    )
    monkeypatch.undo()

    assert staging_recorded_during_the_facts_commit == [True]
    run = instance.get_runs(limit=1)[0]
    assert instance.get_latest_materialization_event(AssetKey(STG_ORDER_ITEMS)).run_id == run.run_id
    assert content(spark) == expected  # the same inputs: the same rows


def test_a_change_reading_little_is_evaluated_interpreted_and_one_reading_more_compiled(spark, built, monkeypatch):
    """SPARK_CODEGEN=auto chooses per change from what its first table reads, and leaves the session as it found it
    (the tests' session is created interpreted: here it starts as a compiled one would)."""
    from resources import spark as spark_module

    factory_mode = "spark.sql.codegen.factoryMode"
    tests_mode = spark.conf.get(factory_mode)
    monkeypatch.setenv("SPARK_CODEGEN", "auto")
    change = Change(Operation.BACKFILL, {t: [START] for t in PUBLISH_ORDER})
    modes = {}
    spark.conf.set(factory_mode, "FALLBACK")
    try:
        for reads, up_to in (("little", spark_module.INTERPRETED_UP_TO_BYTES), ("more", -1)):
            monkeypatch.setattr(spark_module, "INTERPRETED_UP_TO_BYTES", up_to)
            modes[reads] = {
                spark.conf.get(factory_mode) for _ in publishing.publishing(spark, ORDERS, change, RunInfo("t"))
            }
            assert spark.conf.get(factory_mode) == "FALLBACK"
    finally:
        spark.conf.set(factory_mode, tests_mode)
    assert modes == {"little": {"NO_CODEGEN"}, "more": {"FALLBACK"}}


def test_a_run_carries_the_table_days_it_published_as_many_as_its_materializations(built):
    """What estimates fit a run's cost on, read with the run's record instead of counted in its event log."""
    from dagster import DagsterRunStatus, RunsFilter

    from exact_backfills.dagster_names import TABLE_DAYS_TAG

    records = built.get_run_records(RunsFilter(statuses=[DagsterRunStatus.SUCCESS]))
    tagged = {r.dagster_run.run_id: r.dagster_run.tags.get(TABLE_DAYS_TAG) for r in records}
    counted = {run_id: str(built.get_run_stats(run_id).materializations) for run_id in tagged}
    assert tagged == counted and any(n != "0" for n in counted.values())


def test_a_rollback_whose_commit_call_fails_after_its_commit_is_made_records_the_commit_and_holds_its_days(
    spark, built, monkeypatch
):
    """The commit call of the mart fails once Delta has made the commit (FAIL_AFTER_COMMIT, as an answer lost on its
    way back): the log is read, the commit found by its id, and the rollback counts it as made, its version known:
    its days' materializations, audit rows and holds are recorded, the run succeeds. (Last in the module: its days
    stay held.)"""
    from exact_backfills.backfill import run_rollback, step_failures
    from exact_backfills.rollback import RollbackRequest, plan_rollback
    from resources import audit, control
    from resources.delta_io import COMMIT_ID, FAIL_AFTER_COMMIT, history
    from resources.lake import table_path

    instance = built
    a, b = date(2025, 1, 6), date(2025, 1, 7)
    before = versions(spark, DAILY_REVENUE)[0]
    # Its days as they are: checks pass.
    plan = plan_rollback(spark, ORDERS, RollbackRequest(a, b, table=DAILY_REVENUE, version=before))
    monkeypatch.setenv(FAIL_AFTER_COMMIT, DAILY_REVENUE)
    result = run_rollback(ORDERS, plan, instance=instance, echo=lambda _: None)
    monkeypatch.undo()

    assert result.success, step_failures(result)
    made = history(spark, table_path(DAILY_REVENUE), 1)[0]
    assert made.version == before + 1 and json.loads(made.userMetadata)[COMMIT_ID]
    materialized = instance.get_latest_materialization_event(AssetKey(DAILY_REVENUE))
    assert materialized.run_id == result.run_id
    assert materialized.asset_materialization.metadata["delta_version"].value == made.version
    assert "InjectedFailure" in materialized.asset_materialization.metadata["commit_call_failed"].value
    trail = audit.read(spark, ORDERS.name).where(f"run_id = '{result.run_id}' AND asset = '{DAILY_REVENUE}'")
    assert sorted((r.partition, r.delta_version) for r in trail.collect()) == [(a, made.version), (b, made.version)]
    assert [(h.day, h.held_by_run) for h in control.open_holds(spark, ORDERS.name, [a, b])] == [
        (a, result.run_id),
        (b, result.run_id),
    ]


def test_the_audit_trails_files_record_the_days_they_hold_and_a_run_only_appends_to_it(spark, built):
    """Every run reads the trail for its own days, and the trail gains a file per table per run for as long as the
    pipeline lives: each file's smallest and largest day let Delta skip the files of other days. A run's one commit to
    it is its append: nothing rewrites the trail after it (the vacuum merges its small files)."""
    from resources import audit
    from resources.lake import control_path

    path = control_path(ORDERS.name, audit.AUDIT_TABLE)
    properties = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first().properties
    assert {k: properties.get(k) for k in audit.TRAIL_PROPERTIES} == audit.TRAIL_PROPERTIES
    assert audit.AUTO_COMPACT not in properties
    stats = [
        json.loads(json.loads(line)["add"]["stats"])
        for f in sorted(Path(path, "_delta_log").glob("*.json"))
        for line in f.read_text().splitlines()
        if line.startswith('{"add"')
    ]
    assert stats and all(set(s["minValues"]) == set(s["maxValues"]) == {"partition"} for s in stats)
    assert all(s["minValues"]["partition"] <= s["maxValues"]["partition"] for s in stats)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    assert len(history) > 1 and {(c.operation, c.operationParameters["mode"]) for c in history} == {("WRITE", "Append")}


def test_each_tables_files_record_their_row_count_and_no_column_statistics(spark, built):
    """Days are read through their partitions: per-column statistics would skip nothing, yet cost every write and every
    replay of a table's log. The row counts are kept: what a commit says it wrote, day by day, comes from them."""
    from resources.delta_io import _commit_entry
    from resources.lake import table_path

    for table in TABLES:
        path, day = table_path(table), ORDERS.day_columns[table]
        assert (
            spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first().properties["delta.dataSkippingNumIndexedCols"] == "0"
        )
        added = [
            json.loads(line)["add"]
            for f in sorted(Path(path, "_delta_log").glob("*.json"))
            for line in f.read_text().splitlines()
            if line.startswith('{"add"')
        ]
        assert added and {tuple(json.loads(a["stats"])) for a in added} == {("numRecords",)}, table
        latest = _commit_entry(path, versions(spark, table)[0])["by_day"]
        rows_of = {str(r[0]): r[1] for r in spark.read.format("delta").load(path).groupBy(day).count().collect()}
        assert {d: c["rows_written"] for d, c in latest.items() if c["files_added"]} == {
            d: rows_of[d] for d, c in latest.items() if c["files_added"]
        }, table
