"""The checks as objects: Dagster's check results are built in the checks package alone (read from the source with
`ast`); a table over a trailing window reconciles with its window's days; a check of the user's compares a day's
figure with the days before it."""

import ast
from datetime import date, datetime
from pathlib import Path

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from exact_backfills import (
    Calendar,
    DayOverDay,
    DeclarationError,
    Pipeline,
    Reconcile,
    SameDay,
    Staging,
    Table,
    TrailingDays,
    checks,
)
from exact_backfills.builds import build_declared
from resources.lake import REPO_ROOT, table_path
from tests.support.lake import environment
from tests.support.visits import visits_source

DAGSTER_RESULTS = {"AssetCheckResult", "AssetCheckEvaluation"}
CHECKED = ("exact_backfills", "assets_pkg")
CHECKS_PACKAGE = Path("exact_backfills") / "checks"


def dagster_results_built(root: Path) -> list[str]:
    """Where, outside the checks package, a Dagster check result is constructed: `file:line name`."""
    found = []
    for package in CHECKED:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root)
            if relative.is_relative_to(CHECKS_PACKAGE):
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call):
                    called = node.func
                    name = called.id if isinstance(called, ast.Name) else getattr(called, "attr", "")
                    if name in DAGSTER_RESULTS:
                        found.append(f"{relative}:{node.lineno} {name}")
    return found


def test_dagster_check_results_are_built_in_the_checks_package_alone():
    assert dagster_results_built(REPO_ROOT) == []
    # What it looks for is there: the checks package builds both.
    package = "\n".join(p.read_text() for p in (REPO_ROOT / CHECKS_PACKAGE).glob("*.py"))
    assert all(f"{name}(" in package for name in DAGSTER_RESULTS)


# A shop's pipeline, declared here: visits staged from their landing, a 3-day trailing table reconciling with the
# visits of its window, and a daily table whose visit count may not jump from the days before it.
VISITS = visits_source("cv_visits")
STG, TRAILING, DAILY = "cv_stg_visits", "cv_visits_3d", "cv_daily_visits"
CALENDAR = Calendar(first_day=date(2025, 1, 1), last_day=date(2025, 3, 31))
JAN = [date(2025, 1, d) for d in range(1, 7)]
VISITS_PER_DAY = [10, 10, 10, 30, 10, 10]  # a jump on Jan 4


def _window_counts(visits: DataFrame, days: list[date], dropped: date | None) -> DataFrame:
    """Per day of `days`: the visits of the 3 days ending on it (those of `dropped` left out: a build's bug)."""
    kept = visits if dropped is None else visits.where(F.col("visit_date") != F.lit(dropped))
    spark = visits.sparkSession
    ends = spark.createDataFrame([(d,) for d in days], "visit_day date")
    inside = F.col("visit_date").between(F.date_sub("visit_day", 2), F.col("visit_day"))
    return ends.join(kept, inside, "left").groupBy("visit_day").agg(F.count("visit_id").alias("visits_3d"))


def _pipeline(dropped: date | None = None, window_days: int = 3) -> Pipeline:
    trailing = Table(
        TRAILING,
        key=["visit_day"],
        day_column="visit_day",
        upstream={STG: TrailingDays(3)},
        build=lambda spark, days, read: _window_counts(read(STG), days, dropped),
        reconcile=Reconcile(STG, {"visits": ("sum(visits_3d)", "count(1)")}, window_days=window_days),
    )
    daily = Table(
        DAILY,
        key=["visit_day"],
        day_column="visit_day",
        upstream={STG: SameDay()},
        build=lambda spark, days, read: (
            read(STG).groupBy(F.col("visit_date").alias("visit_day")).agg(F.count("*").alias("visits"))
        ),
        checks=[DayOverDay("visits_steady", figure="sum(visits)", max_change=0.6, days_before=2)],
    )
    tables = [Staging(STG, source=VISITS), trailing, daily]
    return Pipeline("checked_visits", sources=[VISITS], tables=tables, calendar=CALENDAR)


def _visits(spark) -> DataFrame:
    rows = [(f"{d}-{i}", d, datetime(2025, 1, 7)) for d, n in zip(JAN, VISITS_PER_DAY, strict=True) for i in range(n)]
    return spark.createDataFrame(rows, "visit_id string, visit_date date, loaded_at timestamp")


def _checked(spark, pipeline: Pipeline, table: str, days: list[date]) -> dict[date, tuple[bool, dict]]:
    """The table's user and reconciliation checks on `days` as a change writing them runs them, built by its build
    from the visits (each upstream read through its day dependency)."""
    visits = _visits(spark)

    def read(upstream: str, read_days: list[date]) -> DataFrame:
        return visits.where(F.col("visit_date").isin(read_days))

    declared = pipeline.by_name[table]
    staged = build_declared(spark, pipeline, declared, days, read)
    verified = checks.evaluate_blocking(
        staged.table, declared, days, checks.Upstream(staged.upstream, staged.upstream_day)
    )
    wanted = {checks.RECONCILES, *(c.name for c in declared.checks)}
    return {o.day: (o.passed, o.metadata) for o in verified.outcomes if o.check in wanted}


def test_a_trailing_window_table_reconciles_with_the_sum_of_its_upstreams_days_in_the_window(spark):
    with environment(PARTITION_START_DATE="2025-01-01"):
        right = _checked(spark, _pipeline(), TRAILING, JAN[2:])
        assert {day: passed for day, (passed, _) in right.items()} == dict.fromkeys(JAN[2:], True)
        # A build losing Jan 4's visits: exactly the windows holding Jan 4 fail, saying by how much.
        wrong = _checked(spark, _pipeline(dropped=JAN[3]), TRAILING, JAN[2:])
    assert [day for day, (passed, _) in wrong.items() if not passed] == JAN[3:6]
    assert wrong[JAN[3]][1]["mismatches"] == "visits: 20 vs 50" and wrong[JAN[2]][1]["mismatch_count"] == 0


def test_a_reconciliation_over_more_days_than_the_table_reads_is_refused_when_declared():
    with pytest.raises(DeclarationError) as refused:
        _pipeline(window_days=4)
    assert f"table {TRAILING}: it reconciles over 4 days of {STG}, which its day dependency on it does not read" in str(
        refused.value
    )


def test_a_day_over_day_check_fails_on_a_day_that_moved_beyond_its_bound_from_the_days_before(spark, lake):
    with environment(PARTITION_START_DATE="2025-01-01"):
        found = _checked(spark, _pipeline(), DAILY, JAN)
        assert [day for day, (passed, _) in found.items() if not passed] == [JAN[3]]  # 30 against 10
        assert found[JAN[3]][1] == {
            "value": 30.0,
            "previous_average": 10.0,
            "relative_change": 2.0,
            "max_change": 0.6,
            "days_compared": 2,
        }
        assert found[JAN[4]][1]["relative_change"] == 0.5 and found[JAN[0]][1]["days_compared"] == 0
        # Days before the change are taken from what is published: Jan 2 published at 100 makes Jan 3 fail, and
        # Jan 4 pass against the average of Jan 2 as published and Jan 3 as the change writes it.
        published = spark.createDataFrame([(JAN[0], 10), (JAN[1], 100)], "visit_day date, visits long")
        published.write.format("delta").partitionBy("visit_day").save(table_path(DAILY))
        later = _checked(spark, _pipeline(), DAILY, JAN[2:])
    assert [day for day, (passed, _) in later.items() if not passed] == [JAN[2]]
    assert later[JAN[2]][1]["previous_average"] == later[JAN[3]][1]["previous_average"] == 55.0
