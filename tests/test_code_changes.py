"""A fixed transform, as its users meet it. It makes exactly the days older code built stale, in its table and in
every table built from them: `stale` says so (and why), and Dagster's built_by_current_code check fails on exactly
those days. `plan` rebuilds them beside the lake and lists as changed exactly the days where a from-scratch build with
the new code differs from what is published, publishing nothing; `promote` writes exactly those days (other days'
files untouched), after which every table equals that from-scratch build and nothing is stale. A restatement since
the plan, or a blocking failure in the plan, makes `promote` refuse. A mart gaining a column is planned with its
schema diff and promoted as a rewrite of the whole table, after which it equals a from-scratch build; over some of its
days only, the plan and a backfill refuse in one line. A source gaining a column keeps its old batches. A table just
declared is stale on exactly its days, never built, which its own backfill builds. The change is made for real: a
copy of the project whose code differs, run against the same lake and instance."""

import json
import re
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import NamedTuple

import pytest
from dagster import AssetKey, RunRequest, SkipReason, build_sensor_context
from pyspark.sql import types as T

from assets_pkg.generate import generate
from bench.harness import corrections, land_batch, next_batch_day
from exact_backfills import ColumnAdded, code_versions, landing
from exact_backfills.backfill import BackfillRequest, run_backfill
from exact_backfills.checks import BUILT_BY_CURRENT_CODE
from exact_backfills.dagster_names import CODE_CHECK_JOB
from exact_backfills.definitions import defs
from exact_backfills.location import definitions_of
from exact_backfills.partitions import days
from resources.delta_io import history, table_exists
from resources.lake import lake_root, table_path
from tests.support.lake import environment, files_by_day, rows, versions
from tests.support.late_batches import check_partition_statuses
from tests.support.orders import DAY_COLUMN, ORDER_ITEMS, ORDERS, PUBLISH_ORDER
from tests.support.projects import (
    CHECK_CODE_VERSIONS,
    FACT_NET_REWRITTEN,
    FEATURE_ROUNDING_FIX,
    MAX_QUANTITY,
    TRANSFORMS,
    Edit,
    Said,
    project_with,
    run_commands,
)

# The sensor as the code location defines it, called as its tick calls it.
code_version_sensor = definitions_of(ORDERS).resolve_sensor_def("code_version_sensor")

pytestmark = pytest.mark.slow  # builds a lake and runs the project's commands in other processes

START, END = date(2025, 1, 1), date(2025, 1, 10)
EVERY_DAY = [d.isoformat() for d in days(START, END)]
TABLES = [*PUBLISH_ORDER, "quarantine_order_items"]
# A fix that caps a customer's units per line at the largest order size (5): it changes only the days a correction
# raised a line above it.
UNITS = 'F.sum("quantity").cast("long")'
CAPPED_UNITS = 'F.sum(F.least("quantity", F.lit(5))).cast("long")'


@pytest.fixture(scope="module")
def built(spark, lake):
    _, instance = lake
    generate(spark, START, END, seed=3, rows_per_day=40)
    assert run_backfill(BackfillRequest(ORDERS, START, END), instance=instance, echo=lambda _: None)
    return instance


# Which days a code change makes stale, shown before anything is rebuilt (these tests write nothing).


def test_with_the_code_that_built_the_lake_nothing_is_stale_by_code_and_every_day_passes(built, capsys):
    from exact_backfills.cli import main

    assert main(["stale", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {}
    for table in PUBLISH_ORDER:
        statuses = check_partition_statuses(built, table, BUILT_BY_CURRENT_CODE)
        assert statuses == dict.fromkeys(EVERY_DAY, "SUCCEEDED"), table
    request = code_version_sensor(build_sensor_context(instance=built, definitions=defs))
    assert isinstance(request, SkipReason), "a lake written by the code loaded now needs no check"


def test_a_fixed_mart_transform_makes_every_day_of_that_mart_stale_and_no_other(built, tmp_path):
    fixed = project_with(tmp_path / "fixed", FEATURE_ROUNDING_FIX)
    versions = (
        "from exact_backfills.code_versions import current; from exact_backfills.pipelines import selected; "
        "import json; print(json.dumps(current(selected())))"
    )
    loaded, as_json, said, _ = run_commands(
        fixed, {"python": versions}, ["stale", "--json"], ["stale"], CHECK_CODE_VERSIONS
    )

    now = json.loads(loaded.out)
    assert {t for t in now if now[t] != code_versions.current(ORDERS)[t]} == {"customer_daily_features"}
    assert json.loads(as_json.out) == {"customer_daily_features": {day: ["code"] for day in EVERY_DAY}}
    before, after = code_versions.current(ORDERS)["customer_daily_features"], now["customer_daily_features"]
    assert f"customer_daily_features: code changed ({before} → {after}) on {len(EVERY_DAY)} day(s)" in said.out
    # Dagster shows exactly those days failing built_by_current_code, every other table's days passing.
    for table in PUBLISH_ORDER:
        expected = "FAILED" if table == "customer_daily_features" else "SUCCEEDED"
        assert check_partition_statuses(built, table, BUILT_BY_CURRENT_CODE) == dict.fromkeys(EVERY_DAY, expected)


def test_the_sensor_launches_the_check_when_the_code_loaded_is_not_the_code_last_checked(built):
    checked = json.dumps(code_versions.current(ORDERS), sort_keys=True)
    unchanged = code_version_sensor(build_sensor_context(instance=built, definitions=defs, cursor=checked))
    assert isinstance(unchanged, SkipReason)
    earlier = json.dumps({**code_versions.current(ORDERS), "customer_daily_features": "0" * 12}, sort_keys=True)
    changed = code_version_sensor(build_sensor_context(instance=built, definitions=defs, cursor=earlier))
    assert isinstance(changed, RunRequest) and changed.job_name == CODE_CHECK_JOB


# Plans and their promotion (the last of these rewrite days).


@pytest.fixture(scope="module")
def fixed(built, tmp_path_factory) -> Path:
    return project_with(tmp_path_factory.mktemp("fixed"), Edit(TRANSFORMS, UNITS, CAPPED_UNITS))


@pytest.fixture(scope="module")
def from_scratch(spark, built, fixed, tmp_path_factory) -> dict[str, dict[str, list[dict]]]:
    """Every table's rows, by day, as the fixed code builds them from scratch over a copy of this lake's landing."""
    scratch = build_from_scratch(fixed, tmp_path_factory.mktemp("scratch"))
    with environment(LAKE_ROOT=str(scratch)):
        return {t: by_day(spark, t) for t in TABLES}


def build_from_scratch(project: Path, scratch: Path) -> Path:
    """A lake in `scratch` built by `project`'s code from scratch, START..END, over a copy of this lake's landing."""
    run_commands(project, built_from_scratch(scratch))
    return scratch


def built_from_scratch(scratch: Path) -> dict[str, str]:
    """A `run_commands` statement, after the commands whose result it is compared with: its copy's code builds a lake
    in `scratch` from scratch, START..END, over a copy of this lake's landing as it is then, with `backfill` on an
    instance of its own; the process's lake and instance are its own again after it. One process fewer to start."""
    lake = {"LAKE_ROOT": str(scratch), "DAGSTER_HOME": str(scratch / "dagster_home")}
    return {
        "python": "import os, shutil\n"
        "from pathlib import Path\n"
        "from exact_backfills.cli import main\n"
        "from resources.lake import lake_root\n"
        f"shutil.copytree(Path(lake_root()) / 'landing', Path({str(scratch)!r}) / 'landing')\n"
        f"was = {{k: os.environ.get(k) for k in {sorted(lake)!r}}}\n"
        f"os.environ.update({lake!r})\n"
        "try:\n"
        f"    assert main(['backfill', '--start', {str(START)!r}, '--end', {str(END)!r}]) == 0\n"
        "finally:\n"
        "    for k, v in was.items():\n"
        "        os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)\n"
    }


def by_day(spark, table: str) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for row in rows(spark, table):
        found.setdefault(row[DAY_COLUMN[table]].isoformat(), []).append(row)
    return found


def changed_days(spark, scratch: dict[str, dict[str, list[dict]]]) -> dict[str, set[str]]:
    """Per table, the days whose published rows differ from the from-scratch build's."""
    differing = {}
    for table in PUBLISH_ORDER:
        published = by_day(spark, table)
        every = set(published) | set(scratch[table])
        differing[table] = {d for d in every if published.get(d, []) != scratch[table].get(d, [])}
    return differing


PLAN = ["plan", "--start", str(START), "--end", str(END), "--json"]


def plan_of(said) -> dict:
    return json.loads(said.out)


def test_a_blocking_failure_in_the_plan_publishes_nothing_and_promote_refuses(spark, built, tmp_path):
    # A "fix" that keys daily_revenue by customer too: several rows per (order_date, channel), which unique_key refuses.
    broken = project_with(
        tmp_path / "broken",
        Edit(
            TRANSFORMS,
            'fact.groupBy("order_date", "channel")',
            'fact.groupBy("order_date", "channel", "customer_id")',
        ),
    )
    before = {t: versions(spark, t)[0] for t in TABLES}

    planned, promoted = run_commands(broken, PLAN, ["promote", "{plan_id}"])

    found = plan_of(planned)
    assert planned.code == 1
    assert {f["check"] for f in found["blocking_failures"]} == {"unique_key"}
    assert {f["table"] for f in found["blocking_failures"]} == {"daily_revenue"}
    assert promoted.code == 2 and "failed 10 blocking check(s)" in promoted.err, promoted.err  # refused
    assert len(promoted.err.strip().splitlines()) == 1, promoted.err
    assert {t: versions(spark, t)[0] for t in TABLES} == before


# The published version of every table, printed by the copy between its commands.
PUBLISHED_VERSIONS = {
    "python": "import json; from resources.delta_io import history; from resources.lake import table_path; "
    "from resources.spark import get_spark; "
    f"print(json.dumps({{t: history(get_spark(), table_path(t), 1)[0].version for t in {TABLES!r}}}))"
}


class Promoted(NamedTuple):
    """The fix planned then promoted in one process of the fixed copy: the lake before, and what each command said."""

    expected: dict[str, set[str]]  # per table, the days a from-scratch build with the fix changes
    files_before: dict[str, dict[str, set[str]]]
    versions_before: dict[str, int]
    planned: Said
    shown: Said
    after_plan: Said
    promoted: Said
    note: Said
    stale: Said
    checked: Said
    again: Said


@pytest.fixture(scope="module")
def promoted(spark, built, fixed, from_scratch) -> Promoted:
    expected = changed_days(spark, from_scratch)
    files_before = {t: files_by_day(spark, t, DAY_COLUMN[t]) for t in PUBLISH_ORDER}
    versions_before = {t: versions(spark, t)[0] for t in TABLES}
    said = run_commands(
        fixed,
        PLAN,
        ["plan", "show", "{plan_id}", "--json"],
        PUBLISHED_VERSIONS,
        ["promote", "{plan_id}"],
        ["report", "--plan", "{plan_id}"],
        ["stale", "--json"],
        ["check", "--start", str(START), "--end", str(END)],
        PLAN,
    )
    return Promoted(expected, files_before, versions_before, *said)


def test_plan_lists_as_changed_exactly_the_days_a_from_scratch_build_with_the_fix_changes_and_publishes_nothing(
    promoted,
):
    expected = promoted.expected
    assert expected["customer_daily_features"] and len(expected["customer_daily_features"]) < len(days(START, END)), (
        "the fix should change some days, not all"
    )

    found = plan_of(promoted.planned)

    assert promoted.planned.code == 0 and found["blocking_failures"] == []
    for table in PUBLISH_ORDER:
        listed = set(found["tables"].get(table, {}).get("changed_days", []))
        assert listed == expected[table], table
    features = found["tables"]["customer_daily_features"]
    assert set(features["changed_days"]) | set(features["unchanged_days"]) == {d.isoformat() for d in days(START, END)}
    assert features["rows_changed"] > 0 and features["rows_added"] == features["rows_removed"] == 0
    assert set(features["changed_columns"]) == {"total_quantity"}
    # Its measures: every one it reconciles with the fact, moved or not, and the sum of each column that moved.
    declared = ORDERS.by_name["customer_daily_features"].reconcile.measures
    assert set(features["measures"]) == {*declared, "total_quantity"}
    assert all(m["before"] == m["after"] for name, m in features["measures"].items() if name in declared)
    total = features["measures"]["total_quantity"]
    assert total["before"] != total["after"]
    # The plan, shown again: the same document, and its status.
    shown = json.loads(promoted.shown.out)
    assert promoted.shown.code == 0 and shown.pop("status") == "open"
    assert shown == {k: v for k, v in found.items() if k not in ("estimate", "measured")}
    assert set(found["tables"]) == {"customer_daily_features"}  # its code alone changed: nothing else is rebuilt
    assert json.loads(promoted.after_plan.out) == promoted.versions_before  # nothing published changed
    # Before it ran, it said what it would build at most (every day of the table whose code changed), and after, what
    # it built.
    every = len(EVERY_DAY)
    assert f"plan: 1 run(s), at most {every} table-day(s) to write (customer_daily_features {every})" in (
        promoted.planned.err
    )
    assert found["estimate"]["table_days"] == found["measured"]["table_days"] == every


def test_promote_writes_exactly_the_changed_days_then_every_table_equals_a_from_scratch_build_and_nothing_is_stale(
    spark, promoted, from_scratch
):
    found = plan_of(promoted.planned)
    assert promoted.promoted.code == 0, promoted.promoted.err
    assert "customer_daily_features: code" in promoted.promoted.out and "total_quantity" in promoted.promoted.out
    for table in PUBLISH_ORDER:
        before, after = promoted.files_before[table], files_by_day(spark, table, DAY_COLUMN[table])
        rewritten = {d for d in set(before) | set(after) if before.get(d) != after.get(d)}
        assert rewritten == promoted.expected[table], table  # exactly the changed days: other days' files untouched
        moved = 1 if promoted.expected[table] else 0
        assert versions(spark, table)[0] == promoted.versions_before[table] + moved, table
    assert all(not changed for changed in changed_days(spark, from_scratch).values())
    assert by_day(spark, "quarantine_order_items") == from_scratch["quarantine_order_items"]
    commit = json.loads(history(spark, table_path("customer_daily_features"), 1)[0].userMetadata)
    assert commit["plan_id"] == found["plan_id"] and commit["operation"] == "promotion"

    assert json.loads(promoted.stale.out) == {}
    assert promoted.checked.code == 0, promoted.checked.out
    assert plan_of(promoted.again)["tables"] == {}  # a second plan finds nothing to do
    before = found["tables"]["customer_daily_features"]["code_version"]["before"]
    assert f"customer_daily_features: code {before}" in promoted.note.out and "(status: promoted)" in promoted.note.out
    assert not (Path(lake_root()) / "warehouse" / "_plans" / found["plan_id"]).exists()  # its shadow tables are gone


def test_a_fact_fix_makes_every_day_built_from_the_fact_stale_and_if_it_changes_no_row_promoting_it_writes_nothing(
    spark, built, tmp_path
):
    same = project_with(tmp_path / "same", FACT_NET_REWRITTEN)
    untouched = [t for t in TABLES if t != "customer_daily_features"]  # whose own code may differ from what built it
    before = {t: versions(spark, t)[0] for t in untouched}

    stale_before, planned, promoted, stale_after = run_commands(
        same, ["stale", "--json"], PLAN, ["promote", "{plan_id}"], ["stale", "--json"]
    )

    # The fact's days, and every mart day built from them, are stale by code.
    derived = ["fact_order_item", "daily_revenue", "customer_daily_features", "daily_category_revenue"]
    assert json.loads(stale_before.out) == {t: {day: ["code"] for day in EVERY_DAY} for t in derived}
    found = plan_of(planned)
    assert found["tables"]["fact_order_item"]["changed_days"] == []
    # Early cutoff: no day of a mart is built from a changed day of the fact, so none is rebuilt.
    assert {"daily_revenue", "daily_category_revenue"}.isdisjoint(found["tables"])
    assert promoted.code == 0, promoted.err
    assert {t: versions(spark, t)[0] for t in untouched} == before
    assert json.loads(stale_after.out) == {}


def test_a_restatement_between_the_plan_and_its_promotion_makes_promote_refuse_naming_the_table(spark, built, fixed):
    # Last: the late batch changes the landing the from-scratch build above was made from. Landed before the plan, it
    # is restated after it, by the fixed code's restatement, as the sensor would launch it once the fix is deployed.
    land_batch(spark, corrections(spark, START, 2), next_batch_day())
    restate = {
        "python": "import json; from exact_backfills.backfill import run_restatement; "
        "from exact_backfills.pipelines import selected; r = run_restatement(selected()); assert r.success; "
        "print(json.dumps({'run_id': r.run_id}))"
    }

    planned, after_plan, restated_run, after_restatement, promoted = run_commands(
        fixed, PLAN, PUBLISHED_VERSIONS, restate, PUBLISHED_VERSIONS, ["promote", "{plan_id}"]
    )

    assert planned.code == 0 and restated_run.code == 0
    assert json.loads(after_restatement.out) != json.loads(after_plan.out), "the restatement moved no table"
    assert promoted.code == 2  # refused
    said = promoted.err
    restatement = f"written by restatement in run {json.loads(restated_run.out)['run_id']}"
    assert " moved since plan " in said and restatement in said, said
    assert said.split(" moved since plan ")[0].split()[-1] in TABLES, said  # it names the table
    assert len(promoted.err.strip().splitlines()) == 1, promoted.err
    assert {t: versions(spark, t)[0] for t in TABLES} == json.loads(after_restatement.out)


# Last (the code before it would change the shape back): a mart gaining a column, a change of its shape, planned
# with its schema diff, promoted as a rewrite of the table.
@pytest.fixture(scope="module")
def wider(fixed, tmp_path_factory) -> Path:
    return project_with(tmp_path_factory.mktemp("wider"), MAX_QUANTITY, base=fixed)


def test_a_mart_gaining_a_column_is_planned_with_its_schema_diff_and_promoted_whole_as_a_from_scratch_build(
    spark, built, wider, tmp_path
):
    first_days = ["--start", str(START), "--end", str(START + timedelta(days=2))]
    before = versions(spark, "daily_revenue")[0]
    upstream = {t: versions(spark, t)[0] for t in ("stg_order_items", "fact_order_item")}  # the plan changes neither

    partial, backfilled, planned, promoted, stale, checked, _ = run_commands(
        wider,
        ["plan", *first_days, "--json"],
        ["backfill", *first_days],
        PLAN,
        ["promote", "{plan_id}"],
        ["stale", "--json"],
        ["check", "--start", str(START), "--end", str(END)],
        built_from_scratch(tmp_path / "scratch"),
    )

    # Over some of its days only, it is refused in one line, saying what to do: by the plan, and by a backfill.
    assert partial.code == 1 and plan_of(partial)["refusals"] == [
        "daily_revenue's columns change (added max_quantity (int)): a change of shape rewrites every day of the table, "
        f"and this plan covers 3 of its 10 day(s); plan --start {START} --end {END}"
    ]
    said = backfilled.out + backfilled.err
    assert backfilled.code != 0 and "a change of shape replaces every day of the table in one commit" in said, said
    assert "Traceback" not in said, said
    assert {t: versions(spark, t)[0] for t in upstream} == upstream  # refused before any table's commit
    # Over every day: its schema diff, every day changed, every row changed in the new column, with its total.
    table = plan_of(planned)["tables"]["daily_revenue"]
    assert planned.code == 0 and table["schema"] == {"added": {"max_quantity": "int"}, "dropped": {}, "retyped": {}}
    assert table["changed_days"] == EVERY_DAY and table["rows_added"] == table["rows_removed"] == 0
    assert table["changed_columns"] == {"max_quantity": table["rows_changed"]} and table["rows_changed"] > 0
    assert table["measures"]["max_quantity"]["before"] == "-"
    reshaped = {t for t, p in plan_of(planned)["tables"].items() if any(p["schema"].values())}
    assert reshaped == {"daily_revenue"}  # no other table changes shape (those whose code differs are rebuilt too)
    # Promoted: the one commit of them all, the table in its new shape, equal to a from-scratch build with the new code.
    assert promoted.code == 0, promoted.err
    assert "columns: added max_quantity (int) (the whole table is rewritten in one commit)" in promoted.out
    assert versions(spark, "daily_revenue")[0] == before + 1
    assert json.loads(stale.out) == {} and checked.code == 0, stale.out + checked.out
    # Dagster shows the table's new shape: its newest materialization's column schema.
    (latest,) = built.fetch_materializations(AssetKey("daily_revenue"), limit=1).records
    shown = latest.asset_materialization.metadata["dagster/column_schema"].schema
    assert ("max_quantity", "int") in {(c.name, c.type) for c in shown.columns}
    published = rows(spark, "daily_revenue")
    with environment(LAKE_ROOT=str(tmp_path / "scratch")):
        assert published == rows(spark, "daily_revenue") and "max_quantity" in published[0]


# After it: a source's contract gains a nullable column, which the batches landed before it lack.
SOURCES = "assets_pkg/sources.py"
INGESTED_AT = (
    '            T.StructField("ingested_at", T.TimestampType(), False),\n        ]\n    ),\n    key=["order_id"'
)


@pytest.fixture(scope="module")
def gained(wider, tmp_path_factory) -> Path:
    """The code after the mart's column: the order item source's contract gains a nullable column from the next
    batch on."""
    first_batch = next_batch_day()
    with_column = Edit(
        SOURCES,
        INGESTED_AT,
        INGESTED_AT.replace(
            "        ]\n", '            T.StructField("coupon_code", T.StringType()),\n        ]\n'
        ).replace(
            "    key=",
            f'    columns_added=[ColumnAdded("coupon_code", date.fromisoformat("{first_batch}"))],\n    key=',
        ),
    )
    return project_with(
        tmp_path_factory.mktemp("gained"),
        Edit(
            SOURCES,
            "from exact_backfills import ",
            "from datetime import date\n\nfrom exact_backfills import ColumnAdded, ",
        ),
        base=project_with(tmp_path_factory.mktemp("contract"), with_column, base=wider),
    )


def test_a_source_gaining_a_column_keeps_its_old_batches_and_carries_the_new_into_staging_as_a_from_scratch_build(
    spark, built, gained, tmp_path
):
    first_batch = next_batch_day()
    # A batch carrying the new column, landed under the new contract: corrections of three items, each with a coupon.
    contract = T.StructType([*ORDER_ITEMS.schema.fields, T.StructField("coupon_code", T.StringType())])
    at = datetime.combine(first_batch, datetime.min.time(), tzinfo=UTC) + timedelta(hours=2)
    items = [(*r[:-1], at, "SPRING", first_batch) for r in corrections(spark, START + timedelta(days=3), 3)]
    batch = spark.createDataFrame(items, T.StructType([*contract.fields, T.StructField("ingest_date", T.DateType())]))
    landing.land(
        {replace(ORDER_ITEMS, schema=contract, columns_added=[ColumnAdded("coupon_code", first_batch)]): batch}
    )

    stale, early, planned, promoted, restated, checked, after, _ = run_commands(
        gained,
        ["stale", "--json"],
        ["restate"],
        PLAN,
        ["promote", "{plan_id}"],
        ["restate"],
        ["check", "--start", str(START), "--end", str(END)],
        ["stale", "--json"],
        built_from_scratch(tmp_path / "scratch"),
    )

    for said in (stale, planned, promoted, restated, checked, after):
        assert said.code == 0 and "Traceback" not in said.err, said
    # Restated before the plan: refused in one line, since it would stage the new column on some days only.
    said = early.out + early.err
    assert early.code != 0 and "a change of shape replaces every day of the table" in said and "Traceback" not in said
    # The contract is staging's code: every day of it is stale, and the plan adds the column to it (and quarantine).
    staging_stale = json.loads(stale.out)["stg_order_items"]
    assert set(staging_stale) == set(EVERY_DAY) and all("code" in why for why in staging_stale.values()), stale.out
    tables = plan_of(planned)["tables"]
    assert tables["stg_order_items"]["schema"]["added"] == {"coupon_code": "string"}
    assert json.loads(after.out) == {}
    staged = rows(spark, "stg_order_items")
    coupons = {(r["order_id"], r["order_item_id"]) for r in staged if r["coupon_code"] == "SPRING"}
    assert len(coupons) == 3 and all(r["coupon_code"] in (None, "SPRING") for r in staged)
    # Nothing lost: the old batches' rows are all still there (their coupon null), and every table is what the new
    # code builds from scratch over the same landing.
    published = {t: rows(spark, t) for t in TABLES}
    with environment(LAKE_ROOT=str(tmp_path / "scratch")):
        assert published == {t: rows(spark, t) for t in TABLES}


# After it: a table is declared, built from the fact.
CHANNEL_ITEMS = "daily_channel_items"
BUILD_CHANNEL_ITEMS = Edit(
    "assets_pkg/pipeline.py",
    "def _import_tpch_arguments(",
    "def build_daily_channel_items(spark: SparkSession, days: list[date], read: Read) -> DataFrame:\n"
    '    return read(FACT_ORDER_ITEM).groupBy("order_date", "channel").agg(F.count(F.lit(1)).alias("items"))\n\n\n'
    "def _import_tpch_arguments(",
)
DECLARE_CHANNEL_ITEMS = Edit(
    "assets_pkg/pipeline.py",
    "    ],\n    generate=_generate,",
    "        Table(\n"
    f'            "{CHANNEL_ITEMS}",\n'
    '            key=["order_date", "channel"],\n'
    '            day_column="order_date",\n'
    "            upstream={FACT_ORDER_ITEM: SameDay()},\n"
    "            build=build_daily_channel_items,\n"
    "        ),\n"
    "    ],\n    generate=_generate,",
)
IMPORT_F = Edit(
    "assets_pkg/pipeline.py",
    "from pyspark.sql import DataFrame, SparkSession\n",
    "from pyspark.sql import DataFrame, SparkSession\nfrom pyspark.sql import functions as F\n",
)


def _declaring_channel_items(base: Path, folder: Path) -> Path:
    """A copy of `base` that declares CHANNEL_ITEMS, built from the fact."""
    declared = base
    for n, edit in enumerate((IMPORT_F, BUILD_CHANNEL_ITEMS, DECLARE_CHANNEL_ITEMS)):
        declared = project_with(folder / f"declared{n}", edit, base=declared)
    return declared


def test_a_table_just_declared_is_stale_on_exactly_its_days_never_built_and_its_backfill_commits_to_no_other(
    spark, built, gained, tmp_path
):
    declared = _declaring_channel_items(gained, tmp_path)
    fact_days = sorted({r["order_date"].isoformat() for r in rows(spark, "fact_order_item")})
    before = {t: versions(spark, t)[0] for t in TABLES}

    stale, said, backfilled, after, checked = run_commands(
        declared,
        ["stale", "--json"],
        ["stale"],
        ["backfill", "--select", CHANNEL_ITEMS, "--start", fact_days[0], "--end", fact_days[-1]],
        ["stale", "--json"],
        ["check", "--start", str(START), "--end", str(END)],
    )

    # Exactly its days, each a day the fact has, and what builds them; nothing else is stale.
    assert json.loads(stale.out) == {CHANNEL_ITEMS: {d: ["never_built"] for d in fact_days}}, stale.out
    hint = f"backfill --select {CHANNEL_ITEMS} --start {fact_days[0]} --end "
    assert f"{CHANNEL_ITEMS}: never built on {len(fact_days)} day(s)" in said.out and hint in said.out, said.out
    # Its backfill builds them and commits to no other table; then nothing is stale and every check passes.
    assert backfilled.code == 0, backfilled.out + backfilled.err
    assert {t: versions(spark, t)[0] for t in TABLES} == before
    assert sorted({r["order_date"].isoformat() for r in rows(spark, CHANNEL_ITEMS)}) == fact_days
    assert json.loads(after.out) == {} and checked.code == 0, after.out + checked.out


def test_a_table_no_longer_declared_is_named_by_stale_and_plan_and_stays_until_retired_its_dagster_history_kept(
    spark, built, gained, tmp_path
):
    """CHANNEL_ITEMS, declared and built above, is removed from the declaration again: the project before it."""
    if not table_exists(CHANNEL_ITEMS):  # alone, built here as above
        declared = _declaring_channel_items(gained, tmp_path)
        assert run_commands(declared, ["backfill", "--select", CHANNEL_ITEMS])[0].code == 0
    published = rows(spark, CHANNEL_ITEMS)
    every_version = versions(spark, CHANNEL_ITEMS)
    others = {t: versions(spark, t)[0] for t in TABLES}

    stale, said, planned, declared, archived, after, again = run_commands(
        gained,
        ["stale", "--json"],
        ["stale"],
        ["plan", "--start", str(START), "--end", str(END)],
        ["retire", "--table", "daily_revenue", "--drop"],
        ["retire", "--table", CHANNEL_ITEMS, "--archive"],
        ["stale"],
        ["retire", "--table", CHANNEL_ITEMS, "--drop"],
    )

    # Named, never touched, until retired: no day of it is stale (nothing builds it), and nothing else is.
    days_published = len({r["order_date"] for r in published})
    assert CHANNEL_ITEMS not in json.loads(stale.out), stale.out
    assert f"{CHANNEL_ITEMS}: no longer declared; its {days_published} published day(s) stay" in said.out, said.out
    assert f"- {CHANNEL_ITEMS}: no longer declared, left as it is" in planned.out, planned.out
    # A declared table is never retired; one line, nothing touched.
    assert declared.code == 2 and "daily_revenue is declared by pipeline" in declared.err, declared
    assert len(declared.err.strip().splitlines()) == 1 and rows(spark, "daily_revenue")
    # Archived whole: moved under _retired, every version readable there; then it is no longer named, and gone.
    assert archived.code == 0 and not table_exists(CHANNEL_ITEMS), archived
    archive = archived.out.split(" archived to ")[1].split(",")[0]
    assert archive.startswith(lake_root()) and "/_retired/" in archive
    kept = [r.asDict() for r in spark.read.format("delta").load(archive).drop("run_id").collect()]
    assert sorted(kept, key=lambda row: repr(sorted(row.items()))) == published
    assert [r.version for r in history(spark, archive)] == every_version
    assert after.code == 0 and CHANNEL_ITEMS not in after.out, after.out
    assert again.code == 2 and f"{CHANNEL_ITEMS} is not on the lake" in again.err, again
    assert {t: versions(spark, t)[0] for t in TABLES} == others
    # Dagster keeps the asset's history: every day it materialized.
    materialized = built.get_materialized_partitions(AssetKey(CHANNEL_ITEMS))
    assert materialized == {r["order_date"].isoformat() for r in published}


# Then the fact is renamed, declared as such.
RENAMED_FACT = "order_facts"
FACT_RENAMED = Edit(
    "assets_pkg/pipeline.py", 'FACT_ORDER_ITEM = "fact_order_item"', f'FACT_ORDER_ITEM = "{RENAMED_FACT}"'
)
RENAME_DECLARED = Edit(
    "assets_pkg/pipeline.py",
    "Table(\n            FACT_ORDER_ITEM,\n",
    'Table(\n            FACT_ORDER_ITEM,\n            renamed_from="fact_order_item",\n',
)


@pytest.fixture(scope="module")
def renamed(gained, tmp_path_factory) -> Path:
    named = project_with(tmp_path_factory.mktemp("name"), FACT_RENAMED, base=gained)
    return project_with(tmp_path_factory.mktemp("renamed"), RENAME_DECLARED, base=named)


def test_a_renamed_table_moves_its_days_in_one_commit_without_a_rebuild_and_its_former_name_stays_until_retired(
    spark, built, renamed
):
    published = rows(spark, "fact_order_item")
    fact_days = sorted({r["order_date"].isoformat() for r in published})
    others = {t: versions(spark, t)[0] for t in TABLES}

    before, early, moved, again, after, checked, said = run_commands(
        renamed,
        ["stale", "--json"],
        ["retire", "--table", "fact_order_item", "--drop"],
        ["rename"],
        ["rename"],
        ["stale", "--json"],
        ["check", "--start", str(START), "--end", str(END)],
        ["stale"],
    )

    # Its days are named as its former name's to move, not as never built; nothing else is stale for the rename.
    stale_before = json.loads(before.out)
    assert stale_before.pop(RENAMED_FACT) == {d: ["renamed"] for d in fact_days}, before.out
    assert early.code == 2 and "fact_order_item is order_facts's former name and holds days it has not" in early.err
    moved_line = f"{RENAMED_FACT}: {len(fact_days)} day(s) moved from fact_order_item without a rebuild"
    assert moved.code == 0 and moved_line in moved.out, moved
    assert again.code == 0 and "nothing to rename" in again.out, again
    # One commit of exactly the rows published; no other table written, the former one left as it was.
    assert rows(spark, RENAMED_FACT) == published
    assert len(versions(spark, RENAMED_FACT)) == 1
    assert {t: versions(spark, t)[0] for t in TABLES} == others
    # The rename alone changes no code version: nothing is stale by code, in it or the tables reading it; every
    # check passes; Dagster has every day of the new asset; the former name is named until retired.
    assert json.loads(after.out) == stale_before, after.out
    assert checked.code == 0, checked.out + checked.err
    assert built.get_materialized_partitions(AssetKey(RENAMED_FACT)) == set(fact_days)
    assert "fact_order_item: no longer declared" in said.out, said.out


# Then a money column of the mart is widened, and the column it gained is dropped: two changes of shape.
WIDENED = Edit(
    TRANSFORMS,
    '        _money_sum("cost_amount"),\n        F.max',
    '        _money_sum("cost_amount").cast("decimal(20,2)").alias("cost_amount"),\n        F.max',
)
DROPPED = Edit(TRANSFORMS, '        F.max("quantity").alias("max_quantity"),\n', "")


def test_a_widened_type_and_a_dropped_column_each_change_every_day_and_are_promoted_whole_as_a_from_scratch_build(
    spark, built, renamed, tmp_path
):
    widened = project_with(tmp_path / "widened", WIDENED, base=renamed)
    dropped = project_with(tmp_path / "dropped", DROPPED, base=widened)
    before = versions(spark, "daily_revenue")[0]

    planned, promoted = run_commands(widened, PLAN, ["promote", "{plan_id}"])

    # The values read the same, wider: still every day changes (its column's type), every row in that column.
    table = plan_of(planned)["tables"]["daily_revenue"]
    assert table["schema"] == {
        "added": {},
        "dropped": {},
        "retyped": {"cost_amount": ["decimal(18,2)", "decimal(20,2)"]},
    }
    assert table["changed_days"] == EVERY_DAY and table["changed_columns"] == {"cost_amount": table["rows_changed"]}
    assert promoted.code == 0 and versions(spark, "daily_revenue")[0] == before + 1, promoted.err
    published = spark.read.format("delta").load(table_path("daily_revenue")).schema
    assert published["cost_amount"].dataType == T.DecimalType(20, 2)

    planned, promoted, stale, checked, _ = run_commands(
        dropped,
        PLAN,
        ["promote", "{plan_id}"],
        ["stale", "--json"],
        ["check", "--start", str(START), "--end", str(END)],
        built_from_scratch(tmp_path / "scratch"),
    )

    table = plan_of(planned)["tables"]["daily_revenue"]
    assert table["schema"] == {"added": {}, "dropped": {"max_quantity": "int"}, "retyped": {}}
    assert table["changed_days"] == EVERY_DAY and table["measures"]["max_quantity"]["after"] == "-"
    assert promoted.code == 0 and versions(spark, "daily_revenue")[0] == before + 2, promoted.err
    assert json.loads(stale.out) == {} and checked.code == 0, stale.out + checked.out
    tables = [RENAMED_FACT if t == "fact_order_item" else t for t in TABLES]
    published_rows = {t: rows(spark, t) for t in tables}
    assert "max_quantity" not in published_rows["daily_revenue"][0]
    with environment(LAKE_ROOT=str(tmp_path / "scratch")):
        assert published_rows == {t: rows(spark, t) for t in tables}


class SourceColumnDropped(NamedTuple):
    undeclared: Path  # the column taken out of the contract only
    declared: Path  # and declared dropped, after the last batch landed with it


@pytest.fixture(scope="module")
def source_column_dropped(renamed, tmp_path_factory) -> SourceColumnDropped:
    added = re.search(r'    columns_added=\[ColumnAdded\("coupon_code", .*\)\],\n', (renamed / SOURCES).read_text())
    assert added, "the contract gained coupon_code above"
    last = sorted(p.name for p in (Path(lake_root()) / "landing" / "order_items").glob("ingest_date=*"))[-1][-10:]
    undeclared = renamed
    for edit in (
        Edit(SOURCES, '            T.StructField("coupon_code", T.StringType()),\n', ""),
        Edit(SOURCES, added[0], ""),
    ):
        undeclared = project_with(tmp_path_factory.mktemp("undeclared"), edit, base=undeclared)
    key = '    key=["order_id"'
    declaration = f'    columns_dropped=[ColumnDropped("coupon_code", date.fromisoformat("{last}"))],\n{key}'
    dropped = project_with(tmp_path_factory.mktemp("declared"), Edit(SOURCES, key, declaration), base=undeclared)
    dropped = project_with(
        tmp_path_factory.mktemp("imported"), Edit(SOURCES, "ColumnAdded, ", "ColumnDropped, "), base=dropped
    )
    return SourceColumnDropped(undeclared, dropped)


def test_a_source_column_dropped_as_declared_keeps_every_batch_landed_with_it_and_leaves_staging_promoted_without_it(
    spark, built, source_column_dropped, tmp_path
):
    undeclared, dropped = source_column_dropped
    # Undeclared, the plan names the files staging holds rows from that the contract would now refuse.
    (refused,) = run_commands(undeclared, PLAN)
    assert refused.code == 1, refused
    (line,) = plan_of(refused)["refusals"]
    assert line.startswith("order_items's contract now refuses ") and "unexpected column coupon_code" in line, line
    staged_before = len(rows(spark, "stg_order_items"))

    stale, planned, promoted, after, checked, _ = run_commands(
        dropped,
        ["stale", "--json"],
        PLAN,
        ["promote", "{plan_id}"],
        ["stale", "--json"],
        ["check", "--start", str(START), "--end", str(END)],
        built_from_scratch(tmp_path / "scratch"),
    )

    # The contract is staging's code: every day of it is stale; the plan drops the column from staging whole.
    assert set(json.loads(stale.out)["stg_order_items"]) == set(EVERY_DAY), stale.out
    assert plan_of(planned)["tables"]["stg_order_items"]["schema"]["dropped"] == {"coupon_code": "string"}
    assert promoted.code == 0 and json.loads(after.out) == {}, promoted.err + after.out
    # Every file landed with the column still counts (a refused one would fail `check`); nothing is lost.
    assert checked.code == 0 and "REFUSED" not in checked.out, checked.out
    staged = rows(spark, "stg_order_items")
    assert len(staged) == staged_before and "coupon_code" not in staged[0]
    tables = [RENAMED_FACT if t == "fact_order_item" else t for t in TABLES]
    published = {t: rows(spark, t) for t in tables}
    with environment(LAKE_ROOT=str(tmp_path / "scratch")):
        assert published == {t: rows(spark, t) for t in tables}


# Last, the mart's key changes: to fewer columns, which its rows are not unique on; then to one more, its rows grouped
# by it too.
REVENUE_KEY = 'DAILY_REVENUE,\n            key=["order_date", "channel"],'
BY_DAY_ONLY = Edit("assets_pkg/pipeline.py", REVENUE_KEY, 'DAILY_REVENUE,\n            key=["order_date"],')
BY_CATEGORY = [
    Edit("assets_pkg/pipeline.py", REVENUE_KEY, REVENUE_KEY.replace('"channel"]', '"channel", "product_category"]')),
    Edit(
        TRANSFORMS,
        'fact.groupBy("order_date", "channel").',
        'fact.groupBy("order_date", "channel", "product_category").',
    ),
]


def test_a_changed_key_is_checked_unique_on_the_new_key_and_promoted_whole_as_a_from_scratch_build(
    spark, built, source_column_dropped, tmp_path
):
    base = source_column_dropped.declared
    by_day = project_with(tmp_path / "by_day", BY_DAY_ONLY, base=base)
    keyed = project_with(tmp_path / "keyed", BY_CATEGORY[0], base=base)
    by_category = project_with(tmp_path / "by_category", BY_CATEGORY[1], base=keyed)
    before = versions(spark, "daily_revenue")[0]

    (not_unique,) = run_commands(by_day, PLAN)
    partial, planned, promoted, stale, checked, _ = run_commands(
        by_category,
        ["backfill", "--start", str(START), "--end", str(START + timedelta(days=2))],
        PLAN,
        ["promote", "{plan_id}"],
        ["stale", "--json"],
        ["check", "--start", str(START), "--end", str(END)],
        built_from_scratch(tmp_path / "scratch"),
    )

    # The uniqueness check runs on the new key: several channels a day, so every day fails it and nothing is written.
    found = plan_of(not_unique)
    assert not_unique.code == 1 and {(f["table"], f["check"]) for f in found["blocking_failures"]} == {
        ("daily_revenue", "unique_key")
    }
    assert found["tables"]["daily_revenue"]["key"] == {"before": ["order_date", "channel"], "after": ["order_date"]}
    # Over some days only, a backfill is refused in one line: the key changes every day or none.
    said = partial.out + partial.err
    key_changes = "key changes (order_date, channel → order_date, channel, product_category): a change of shape"
    assert partial.code != 0 and key_changes in said and "nothing of 2025-01-01..2025-01-03 was published" in said, said
    assert "Traceback" not in said, said
    # Over every day: the key and the new column, every day changed, rows compared whole (none "changed" by key).
    table = plan_of(planned)["tables"]["daily_revenue"]
    assert table["key"]["after"] == ["order_date", "channel", "product_category"]
    assert table["schema"]["added"] == {"product_category": "string"}
    assert table["changed_days"] == EVERY_DAY and table["rows_changed"] == 0
    assert table["rows_added"] > table["rows_removed"] > 0  # more rows, one per category
    assert promoted.code == 0 and "key changes (order_date, channel → " in promoted.out, promoted.err
    assert versions(spark, "daily_revenue")[0] == before + 1  # one commit
    assert json.loads(stale.out) == {} and checked.code == 0, stale.out + checked.out
    published = rows(spark, "daily_revenue")
    with environment(LAKE_ROOT=str(tmp_path / "scratch")):
        assert published == rows(spark, "daily_revenue")
