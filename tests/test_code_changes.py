"""A fixed transform makes exactly the days older code built stale, in its table and in every table built from them:
`stale` says so (and why), and Dagster's built_by_current_code check fails on exactly those days. `plan` rebuilds them
beside the lake and lists as changed exactly the days the fix changes, publishing nothing; `promote` writes exactly
those days, after which every table equals a from-scratch build with the new code. The change is made for real: a
copy of the project whose transform differs, run against the same lake and instance."""

import json
from datetime import date

import pytest
from dagster import RunRequest, SkipReason, build_sensor_context

from assets_pkg import code_versions
from assets_pkg.backfill import run_backfill
from assets_pkg.checks import BUILT_BY_CURRENT_CODE
from assets_pkg.code_changes import code_version_sensor
from assets_pkg.dagster_names import CODE_CHECK_JOB
from assets_pkg.definitions import defs
from assets_pkg.generate import generate
from assets_pkg.partitions import days
from assets_pkg.tables import PUBLISH_ORDER
from tests.support.late_batches import check_partition_statuses
from tests.support.projects import project_with, run_in

pytestmark = pytest.mark.slow  # builds a lake and runs the project's commands in another process

START, END = date(2025, 1, 1), date(2025, 1, 6)
EVERY_DAY = [d.isoformat() for d in days(START, END)]


@pytest.fixture(scope="module")
def built(spark, lake):
    _, instance = lake
    generate(spark, START, END, seed=11, rows_per_day=20)
    assert run_backfill(START, END, instance=instance, echo=lambda _: None)
    return instance


TRANSFORMS = "assets_pkg/transforms.py"


FIX = ('F.round(F.sum("discount_amount") / gross, 4)', 'F.round(F.sum("discount_amount") / gross, 2)')


def test_with_the_code_that_built_the_lake_nothing_is_stale_by_code_and_every_day_passes(built, capsys):
    from assets_pkg.cli import main

    assert main(["stale", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {}
    for table in PUBLISH_ORDER:
        statuses = check_partition_statuses(built, table, BUILT_BY_CURRENT_CODE)
        assert statuses == dict.fromkeys(EVERY_DAY, "SUCCEEDED"), table
    request = code_version_sensor(build_sensor_context(instance=built, definitions=defs))
    assert isinstance(request, SkipReason), "a lake written by the code loaded now needs no check"


def test_a_fixed_mart_transform_makes_every_day_of_that_mart_stale_and_no_other(built, tmp_path):
    fixed = project_with(tmp_path / "fixed", TRANSFORMS, *FIX)
    check = "from assets_pkg.code_versions import current; import json; print(json.dumps(current()))"
    versions = json.loads(run_in(fixed, "-c", check).stdout)
    assert {t for t in versions if versions[t] != code_versions.current()[t]} == {"customer_daily_features"}

    stale = json.loads(run_in(fixed, "-m", "assets_pkg", "stale", "--json").stdout)
    assert stale == {"customer_daily_features": {day: ["code"] for day in EVERY_DAY}}
    said = run_in(fixed, "-m", "assets_pkg", "stale").stdout
    before, after = code_versions.current()["customer_daily_features"], versions["customer_daily_features"]
    assert f"customer_daily_features: code changed ({before} → {after}) on {len(EVERY_DAY)} day(s)" in said

    # The fixed code's check job, as its sensor launches it, fails exactly those days in Dagster, saying why.
    launch = (
        "from dagster import DagsterInstance; from assets_pkg.definitions import defs; "
        f"assert defs.resolve_job_def({CODE_CHECK_JOB!r}).execute_in_process(instance=DagsterInstance.get()).success"
    )
    run_in(fixed, "-c", launch)
    for table in PUBLISH_ORDER:
        expected = "FAILED" if table == "customer_daily_features" else "SUCCEEDED"
        assert check_partition_statuses(built, table, BUILT_BY_CURRENT_CODE) == dict.fromkeys(EVERY_DAY, expected)


def test_a_fixed_fact_transform_makes_the_facts_days_and_every_mart_day_built_from_them_stale(built, tmp_path):
    net = '(F.col("gross_amount") - F.col("discount_amount")).cast(MONEY)'
    fixed = project_with(tmp_path / "fixed", TRANSFORMS, net, net.replace(")).cast", ") - F.lit(0)).cast"))
    stale = json.loads(run_in(fixed, "-m", "assets_pkg", "stale", "--json").stdout)
    derived = ["fact_order_item", "daily_revenue", "customer_daily_features", "daily_category_revenue"]
    assert stale == {t: {day: ["code"] for day in EVERY_DAY} for t in derived}


def test_the_sensor_launches_the_check_when_the_code_loaded_is_not_the_code_last_checked(built):
    checked = json.dumps(code_versions.current(), sort_keys=True)
    unchanged = code_version_sensor(build_sensor_context(instance=built, definitions=defs, cursor=checked))
    assert isinstance(unchanged, SkipReason)
    earlier = json.dumps({**code_versions.current(), "customer_daily_features": "0" * 12}, sort_keys=True)
    changed = code_version_sensor(build_sensor_context(instance=built, definitions=defs, cursor=earlier))
    assert isinstance(changed, RunRequest) and changed.job_name == CODE_CHECK_JOB
