"""A pipeline written outside the repository, as a new user writes one: two sources (visits, and stores whose region
changes), three tables (the two staging tables and a weekly table with a 7-day trailing window on visits, the store's
region as of the day, and a check of the user's own). Nothing in the repository names it. It is backfilled and
checked, restated after late and corrected batches on exactly the days they change, planned and promoted after a
code change, and rolled back; after each, every table equals a from-scratch build.

The tests share one lake and run in file order."""

import contextlib
import io
import json
import shutil
import sys
import textwrap
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from exact_backfills import land_batch
from exact_backfills.backfill import BackfillRequest, run_backfill, run_checks, run_restatement, run_rollback
from exact_backfills.cli import main
from exact_backfills.dagster_names import RELEASE_TAG
from exact_backfills.pipelines import load
from exact_backfills.rollback import RollbackRequest, plan_rollback
from resources import control
from resources.delta_io import read_table
from resources.lake import lake_root
from tests.support.lake import environment, from_scratch, rows
from tests.support.late_batches import assert_rewrote_exactly, snapshot
from tests.support.projects import Said, run_commands, run_in

pytestmark = pytest.mark.slow  # builds a lake and runs backfills: minutes, not seconds

REFERENCE = "shop.pipeline:pipeline"
START, END = date(2025, 1, 1), date(2025, 1, 31)

# The user's package, as they would write it: nothing here is the repository's.
PIPELINE = '''
"""A shop's visits and stores, by week ending each day."""

from datetime import date

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from exact_backfills import AsOf, DayCheck, Pipeline, Read, Rule, Source, SourceKind, Staging, Table, TrailingDays
from exact_backfills import Calendar, valid_to

VISITS = Source(
    "shop_visits",
    schema=T.StructType(
        [
            T.StructField("visit_id", T.StringType(), False),
            T.StructField("store_id", T.LongType(), False),
            T.StructField("visit_date", T.DateType(), False),
            T.StructField("basket", T.DecimalType(10, 2)),
            T.StructField("loaded_at", T.TimestampType(), False),
        ]
    ),
    key=["visit_id"],
    day="visit_date",
    newest="loaded_at",
    loaded_at="loaded_at",
    rules=[Rule("negative_basket", "basket < 0")],
)
STORES = Source(
    "shop_stores",
    schema=T.StructType(
        [
            T.StructField("store_id", T.LongType(), False),
            T.StructField("region", T.StringType()),
            T.StructField("moved_at", T.TimestampType(), False),
            T.StructField("loaded_at", T.TimestampType(), False),
        ]
    ),
    key=["store_id"],
    day="moved_at",
    newest="moved_at",
    loaded_at="loaded_at",
    kind=SourceKind.DIMENSION,
)


def weekly(visits: DataFrame, stores: DataFrame, days: list[date]) -> DataFrame:
    per_day = visits.groupBy("store_id", "visit_date").agg(
        F.count(F.lit(1)).alias("visits"), F.sum("basket").alias("baskets")
    )
    ending = per_day.withColumn("week_ending", F.explode(F.sequence("visit_date", F.date_add("visit_date", 6))))
    week = ending.where(F.col("week_ending").isin(days)).groupBy("store_id", "week_ending").agg(
        F.sum("visits").cast("long").alias("visits_7d"),
        F.sum(counted("baskets")).cast("decimal(12,2)").alias("baskets_7d"),
    )
    regions = valid_to(stores, ["store_id"]).select(
        F.col("store_id").alias("_store"), "valid_from", "valid_to", "region"
    )
    as_of = (
        (week.store_id == regions._store)
        & (week.week_ending >= regions.valid_from)
        & (regions.valid_to.isNull() | (week.week_ending <= regions.valid_to))
    )
    return week.join(regions, as_of, "left").select("store_id", "week_ending", "visits_7d", "baskets_7d", "region")


def counted(basket: str) -> Column:
    return F.col(basket)


def build_store_week(spark: SparkSession, days: list[date], read: Read) -> DataFrame:
    return weekly(read("stg_shop_visits"), read("dim_shop_stores"), days)


pipeline = Pipeline(
    name="shop",
    sources=[VISITS, STORES],
    calendar=Calendar(first_day=date(2025, 1, 1), last_day=date(2025, 3, 31)),
    tables=[
        Staging("stg_shop_visits", source=VISITS),
        Staging("dim_shop_stores", source=STORES),
        Table(
            "shop_store_week",
            key=["store_id", "week_ending"],
            day_column="week_ending",
            upstream={"stg_shop_visits": TrailingDays(7), "dim_shop_stores": AsOf(on=["store_id"])},
            build=build_store_week,
            checks=[
                DayCheck(
                    "every_store_has_a_region",
                    figures={"without": "count_if(region IS NULL)"},
                    passes=lambda figures: figures["without"] == 0,
                    blocking=True,
                )
            ],
        ),
    ],
)
'''
# The user's fix: a basket over 63.00 counts as 63.00 in the weekly total.
CAPPED = ("    return F.col(basket)", "    return F.least(F.col(basket), F.lit(63))")


def write_package(root: Path, text: str) -> Path:
    (root / "shop").mkdir(parents=True)
    (root / "shop" / "__init__.py").write_text("")
    (root / "shop" / "pipeline.py").write_text(textwrap.dedent(text))
    return root


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    root = write_package(tmp_path_factory.mktemp("users"), PIPELINE)
    sys.path.insert(0, str(root))
    try:
        yield load(REFERENCE)
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m == "shop" or m.startswith("shop.")]:
            del sys.modules[name]


def _landed(spark, shop, source_name: str, rows_: list[tuple], batch: date) -> None:
    """Rows landed as a user lands them: a new batch, its columns checked against the contract first."""
    source = shop.sources_by_name[source_name]
    land_batch(source, spark.createDataFrame(rows_, source.schema), batch)


def _at(day: date, hour: int = 1) -> datetime:
    return datetime.combine(day, datetime.min.time(), tzinfo=UTC) + timedelta(hours=hour)


@pytest.fixture(scope="module")
def built(spark, lake, shop):
    _, instance = lake
    stores = [(s, "north" if s % 2 else "south", _at(START, 0), _at(START)) for s in (1, 2, 3)]
    _landed(spark, shop, "shop_stores", stores, START)
    for n in range((END - START).days + 1):
        day = START + timedelta(days=n)
        visits = [
            (f"v{day:%m%d}-{i}", 1 + i % 3, day, Decimal(5 + (i * 7 + n * 3) % 60), _at(day + timedelta(days=1)))
            for i in range(6)
        ]
        _landed(spark, shop, "shop_visits", visits, day + timedelta(days=1))
    assert run_backfill(BackfillRequest(shop, START, END), instance=instance, echo=lambda _: None)
    assert run_restatement(shop, instance).success  # reads every batch once: nothing to restate
    return instance


def run_in_process(argv: list[str]) -> Said:
    """The command line, in this process: its exit code and what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(argv)
    return Said(code, out.getvalue(), "")


def every_table(spark, shop) -> dict[str, list[dict]]:
    return {t: rows(spark, t) for t in shop.every_table}


def test_the_pipeline_is_backfilled_and_every_check_passes_its_own_included(spark, shop, built):
    result, evaluations = run_checks(shop, START, END, shop.publish_order, instance=built)
    assert result.success and evaluations and all(e.passed for e in evaluations)
    own = [e for e in evaluations if e.check_name == "every_store_has_a_region"]
    assert len(own) == (END - START).days + 1 and own[0].metadata["without"].value == 0
    assert read_table(spark, "shop_store_week").count() == 3 * ((END - START).days + 1)


def test_late_and_corrected_batches_restate_exactly_their_days_through_the_window_and_the_dimension(
    spark, shop, built, tmp_path
):
    late_day, moved = START + timedelta(days=9), START + timedelta(days=20)
    before = snapshot(spark, shop.every_table, shop.day_columns)
    batch = END + timedelta(days=3)
    _landed(spark, shop, "shop_visits", [("late-1", 1, late_day, Decimal("12.00"), _at(batch))], batch)
    _landed(spark, shop, "shop_stores", [(2, "east", _at(moved, 9), _at(batch))], batch)
    assert run_restatement(shop, built).success
    window = {late_day + timedelta(days=i) for i in range(7)}
    week_of_store_2 = {moved + timedelta(days=i) for i in range((END - moved).days + 1)}
    expected = {
        "stg_shop_visits": {late_day},
        "dim_shop_stores": {moved},
        "shop_store_week": window | week_of_store_2,
    }  # (quarantine_shop_visits: its day written empty again, which Delta records as no commit)
    assert_rewrote_exactly(spark, before, expected, tables=list(expected), day_column=shop.day_columns)
    regions = {r.week_ending: r.region for r in read_table(spark, "shop_store_week").where("store_id = 2").collect()}
    assert all((region == "east") == (day >= moved) for day, region in regions.items())
    assert every_table(spark, shop) == from_scratch(spark, tmp_path, START, END, pipeline=shop)


def test_the_late_day_rolled_back_rebuilds_the_weeks_that_hold_it_and_its_release_restores_them(
    spark, shop, built, tmp_path
):
    """The restatement above rolled back on the late visit's day alone: its week, the six later days' 7-day totals, is
    rebuilt in the same change, so every table is what a from-scratch build of the landing without the late visit
    makes, with no further command; released, the lake is what it was after the restatement."""
    late_day, batch = START + timedelta(days=9), END + timedelta(days=3)
    restatement = built.get_runs(limit=1)[0]
    restated = every_table(spark, shop)
    plan = plan_rollback(spark, shop, RollbackRequest(late_day, late_day, before_run=restatement.run_id))
    week = [late_day + timedelta(days=i) for i in range(1, 7)]
    assert plan.carried == {"shop_store_week": week}
    assert run_rollback(shop, plan, instance=built, echo=lambda _: None).success
    without = from_scratch(spark, tmp_path, START, END, pipeline=shop, leave_out=(f"shop_visits/ingest_date={batch}",))
    assert every_table(spark, shop) == without
    # Held: a backfill over the day is refused, in one line, exit 2, nothing written.
    with environment(DAGSTER_HOME=built.root_directory):
        refused = run_in_process(
            ["--pipeline", REFERENCE, "backfill", "--start", str(late_day), "--end", str(late_day)]
        )
    assert refused.code == 2 and "held since a rollback" in refused.out, refused

    assert run_backfill(
        BackfillRequest(shop, late_day, late_day, tags={RELEASE_TAG: "true"}), instance=built, echo=lambda _: None
    )
    assert control.open_holds(spark, shop.name) == []
    assert every_table(spark, shop) == restated


def built_from_scratch(spark, shop, code: Path, scratch: Path) -> dict[str, list[dict]]:
    """Every table as `code` builds it from scratch, START..END, over a copy of this lake's landing."""
    shutil.copytree(Path(lake_root()) / "landing", scratch / "landing")
    on = ["-m", "exact_backfills", "--pipeline", REFERENCE]
    run_in(
        code,
        *on,
        "backfill",
        "--start",
        str(START),
        "--end",
        str(END),
        LAKE_ROOT=str(scratch),
        DAGSTER_HOME=str(scratch / "home"),
    )
    with environment(LAKE_ROOT=str(scratch)):
        return every_table(spark, shop)


def test_a_code_change_is_planned_and_promoted_on_exactly_the_days_it_changes(spark, shop, built, tmp_path):
    fixed = write_package(tmp_path / "fixed", PIPELINE.replace(*CAPPED))
    expected = built_from_scratch(spark, shop, fixed, tmp_path / "scratch")
    published = every_table(spark, shop)
    changed = {
        r["week_ending"]
        for r in [*expected["shop_store_week"], *published["shop_store_week"]]
        if (r in expected["shop_store_week"]) != (r in published["shop_store_week"])
    }
    assert changed and len(changed) < (END - START).days + 1, "the fix changes some weeks, not all"

    on = ["--pipeline", REFERENCE]
    planned, promoted = run_commands(
        fixed, [*on, "plan", "--start", str(START), "--end", str(END), "--json"], [*on, "promote", "{plan_id}"]
    )
    plan = json.loads(planned.out)
    assert planned.code == 0 and plan["promotable"], planned.err
    assert {date.fromisoformat(d) for d in plan["tables"]["shop_store_week"]["changed_days"]} == changed
    assert not plan["tables"].get("stg_shop_visits", {}).get("changed_days")
    assert promoted.code == 0, promoted.err
    assert every_table(spark, shop) == expected


def test_the_promotion_rolled_back_restores_every_day_it_wrote_and_holds_them(spark, shop, built, tmp_path):
    promotion = built.get_runs(limit=1)[0]
    assert promotion.job_name == "promote_plan"
    plan = plan_rollback(spark, shop, RollbackRequest(START, END, before_run=promotion.run_id))
    assert list(plan.restore) == ["shop_store_week"] and plan.rebuild == []
    assert run_rollback(shop, plan, instance=built, echo=lambda _: None).success
    assert [h.day for h in control.open_holds(spark, shop.name)] == [
        START + timedelta(days=n) for n in range((END - START).days + 1)
    ]
    # What it restored is what the code loaded here builds: the table before the fix, as a from-scratch build.
    assert every_table(spark, shop) == from_scratch(spark, tmp_path, START, END, pipeline=shop)


# Then the user's weekly table gains a column: on how many of its 7 days a store had visits.
VISIT_DAYS = (
    '        F.sum(counted("baskets")).cast("decimal(12,2)").alias("baskets_7d"),\n    )',
    '        F.sum(counted("baskets")).cast("decimal(12,2)").alias("baskets_7d"),\n'
    '        F.count(F.lit(1)).cast("long").alias("visit_days_7d"),\n    )',
)
SELECTED = ('"baskets_7d", "region")', '"baskets_7d", "region", "visit_days_7d")')


def test_the_weekly_table_gaining_a_column_is_planned_whole_and_promoted_as_a_from_scratch_build(
    spark, shop, built, tmp_path
):
    assert run_backfill(  # the rolled-back days released, by the code that holds them
        BackfillRequest(shop, START, END, tags={RELEASE_TAG: "true"}), instance=built, echo=lambda _: None
    )
    gained = write_package(tmp_path / "gained", PIPELINE.replace(*VISIT_DAYS).replace(*SELECTED))
    held = sorted({r["week_ending"].isoformat() for r in rows(spark, "shop_store_week")})
    expected = built_from_scratch(spark, shop, gained, tmp_path / "scratch")

    on = ["--pipeline", REFERENCE]
    planned, promoted = run_commands(
        gained, [*on, "plan", "--start", str(START), "--end", str(END), "--json"], [*on, "promote", "{plan_id}"]
    )

    plan = json.loads(planned.out)
    week = plan["tables"]["shop_store_week"]
    assert planned.code == 0 and plan["promotable"], planned.out + planned.err
    assert week["schema"] == {"added": {"visit_days_7d": "bigint"}, "dropped": {}, "retyped": {}}
    assert week["changed_days"] == held and week["rows_added"] == week["rows_removed"] == 0
    assert set(plan["tables"]) == {"shop_store_week"}  # its code alone changed: staging is not rebuilt
    assert promoted.code == 0, promoted.err
    assert every_table(spark, shop) == expected and "visit_days_7d" in expected["shop_store_week"][0]
