"""A table's code version is derived from the code that decides its rows: a change to its transform changes its
version and no other table's; formatting, comments and docstrings change nothing. The days a change makes stale are
the days older code built, and the days built from them."""

import shutil
from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path

import pytest

from exact_backfills.code_versions import code_versions as versions_of
from exact_backfills.declare import Pipeline, Staging
from exact_backfills.dependencies import stale_by_code
from resources.lake import REPO_ROOT
from tests.support.orders import ORDERS, PUBLISH_ORDER


def code_versions(root: Path | None = None) -> dict[str, str]:
    """The orders pipeline's versions, from the repository's sources or a copy's."""
    return versions_of(ORDERS, [root] if root else None)


@pytest.fixture
def project(tmp_path) -> Path:
    """A copy of the project's sources, to edit."""
    for package in ("exact_backfills", "assets_pkg", "examples", "resources"):
        shutil.copytree(REPO_ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "java"))
    return tmp_path


def edit(project: Path, module: str, old: str, new: str) -> None:
    path = project / module
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} is not in {module} exactly once"
    path.write_text(text.replace(old, new))


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {table for table in before if before[table] != after[table]}


def test_the_versions_of_the_project_as_it_is_are_the_same_computed_twice_and_from_a_copy(project):
    assert code_versions() == code_versions(project) == code_versions(project)
    assert all(len(v) == 12 for v in code_versions().values())


def test_a_fix_to_a_mart_transform_changes_that_marts_version_and_no_other(project):
    before = code_versions(project)
    edit(
        project,
        "assets_pkg/transforms.py",
        'F.round(F.sum("discount_amount") / gross, 4)',
        'F.round(F.sum("discount_amount") / gross, 3)',
    )
    assert changed(before, code_versions(project)) == {"customer_daily_features"}


def test_a_change_to_a_helper_reaches_every_table_whose_transform_calls_it(project):
    before = code_versions(project)
    edit(
        project,
        "assets_pkg/transforms.py",
        "return F.sum(column).cast(MONEY).alias(column)",
        "return F.sum(column).cast(MONEY).alias(column.lower())",
    )
    marts = {"daily_revenue", "customer_daily_features", "daily_category_revenue"}
    assert changed(before, code_versions(project)) == marts


def test_a_change_to_the_fact_changes_the_fact_not_the_marts_built_from_it(project):
    before = code_versions(project)
    edit(
        project,
        "assets_pkg/transforms.py",
        '(F.col("gross_amount") - F.col("discount_amount")).cast(MONEY)',
        '(F.col("gross_amount") - F.col("discount_amount") + F.lit(0)).cast(MONEY)',
    )
    # The marts' days built from the fact's changed days are stale through the graph, not by their own version.
    assert changed(before, code_versions(project)) == {"fact_order_item"}


def test_staging_and_its_quarantine_share_a_version_that_its_restatement_build_is_part_of(project):
    before = code_versions(project)
    assert before["stg_order_items"] == before["quarantine_order_items"]
    edit(
        project,
        "exact_backfills/builds.py",
        "every_version = versions.unionByName(",
        "every_version = versions.distinct().unionByName(",
    )
    assert changed(before, code_versions(project)) == {"stg_order_items", "quarantine_order_items"}


def test_a_change_to_the_spec_of_a_table_changes_its_version(project):
    before = code_versions(project)
    edit(project, "assets_pkg/pipeline.py", 'key=["order_date", "channel"],', 'key=["channel", "order_date"],')
    assert changed(before, code_versions(project)) == {"daily_revenue"}


def _renamed(pipeline: Pipeline, old: str, new: str, declared: bool) -> Pipeline:
    """`pipeline` as a copy declares it whose table `old` is called `new` (`declared`: with renamed_from)."""

    def carried(t):
        if isinstance(t, Staging):
            return t
        rec = t.reconcile and replace(
            t.reconcile, upstream=new if t.reconcile.upstream == old else t.reconcile.upstream
        )
        return replace(
            t,
            name=new if t.name == old else t.name,
            upstream={new if u == old else u: d for u, d in t.upstream.items()},
            reconcile=rec,
            renamed_from=old if t.name == old and declared else t.renamed_from,
        )

    found = replace(pipeline, tables=[carried(t) for t in pipeline.tables])
    object.__setattr__(found, "declared_in", pipeline.declared_in)
    return found


def test_a_rename_declared_changes_no_version_and_one_undeclared_changes_the_table_and_every_table_reading_it(project):
    before = code_versions(project)
    readers = {t.name for t in ORDERS.tables if "fact_order_item" in t.upstream}
    edit(project, "assets_pkg/pipeline.py", 'FACT_ORDER_ITEM = "fact_order_item"', 'FACT_ORDER_ITEM = "order_facts"')

    def by_old_name(versions: dict[str, str]) -> dict[str, str]:
        return {"fact_order_item" if t == "order_facts" else t: v for t, v in versions.items()}

    undeclared = versions_of(_renamed(ORDERS, "fact_order_item", "order_facts", declared=False), [project])
    assert changed(before, by_old_name(undeclared)) == {"fact_order_item", *readers}
    declaration = "Table(\n            FACT_ORDER_ITEM,\n"
    edit(project, "assets_pkg/pipeline.py", declaration, declaration + '            renamed_from="fact_order_item",\n')
    declared = versions_of(_renamed(ORDERS, "fact_order_item", "order_facts", declared=True), [project])
    assert by_old_name(declared) == before


def test_formatting_comments_and_docstrings_change_no_version(project):
    before = code_versions(project)
    path = project / "assets_pkg" / "transforms.py"
    text = path.read_text()
    signature = "def customer_daily_features(fact: DataFrame) -> DataFrame:\n"
    text = text.replace(signature + '    """', signature + '    # a comment\n    """Reworded. ')
    text = text.replace('    gross = F.sum("gross_amount")', '\n    gross = F.sum(  "gross_amount"  )  # spaces\n')
    path.write_text(text)
    assert code_versions(project) == before


# Which days a code change makes stale: pure, from what built each published day and the code loaded now.

D = date(2025, 1, 1)
DAYS = [D + timedelta(days=n) for n in range(5)]
NOW = {t: f"{t}-v2" for t in PUBLISH_ORDER}


def built(**old: list[date]) -> dict[str, dict[date, str]]:
    """Every table's days built by its current code, but the days given per table, built by its older code."""
    return {t: {d: (f"{t}-v1" if d in old.get(t, []) else NOW[t]) for d in DAYS} for t in PUBLISH_ORDER}


def test_nothing_is_stale_when_every_day_was_built_by_the_code_loaded_now():
    assert all(not days for days in stale_by_code(ORDERS, built(), NOW).values())


def test_a_marts_older_days_are_stale_in_that_mart_alone():
    stale = stale_by_code(ORDERS, built(customer_daily_features=DAYS[:3]), NOW)
    assert {t: sorted(days) for t, days in stale.items() if days} == {"customer_daily_features": DAYS[:3]}
    assert stale["customer_daily_features"][D].describe() == (
        "customer_daily_features: code changed (customer_daily_features-v1 → customer_daily_features-v2)"
    )


def test_the_facts_stale_days_make_the_same_days_of_every_mart_stale_saying_why():
    stale = stale_by_code(ORDERS, built(fact_order_item=[DAYS[1], DAYS[3]]), NOW)
    assert {t: sorted(days) for t, days in stale.items() if days} == {
        t: [DAYS[1], DAYS[3]]
        for t in ["fact_order_item", "daily_revenue", "customer_daily_features", "daily_category_revenue"]
    }
    assert stale["daily_revenue"][DAYS[1]].table == "fact_order_item"


def test_a_dimension_day_makes_every_later_fact_day_stale_as_it_is_read_as_of_the_day():
    stale = stale_by_code(ORDERS, built(dim_product=[DAYS[2]]), NOW)
    assert sorted(stale["dim_product"]) == [DAYS[2]]
    assert sorted(stale["fact_order_item"]) == DAYS[2:] and sorted(stale["daily_revenue"]) == DAYS[2:]
    assert stale["stg_order_items"] == {}


def test_a_day_built_before_versions_were_recorded_is_stale():
    recorded = built()
    recorded["stg_order_items"][D] = None
    assert (
        stale_by_code(ORDERS, recorded, NOW)["stg_order_items"][D]
        .describe()
        .endswith("(unrecorded → stg_order_items-v2)")
    )
