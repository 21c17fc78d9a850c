"""What a person sees in the Dagster UI, in Chromium, against a real webserver and daemon, on a lake of 90 built days:
a range backfill launched from the Materialize dialog succeeds in chunked runs, changes nothing it re-runs and shows
every day materialized, every check passed and every table's freshness policy passing; a duplicate written behind the
pipeline's back shows its day failed with the numbers; a late batch shows exactly its days stale, then passed after
the sensor's restatement; the landing shows as observed; a fixed transform shows exactly the days it makes
stale. The tests share the lake and run in file order."""

import base64
import urllib.error
import urllib.parse
import urllib.request
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from dagster import AssetKey, RunsFilter

from assets_pkg.generate import generate
from exact_backfills import cli
from exact_backfills.automation import landing_state
from exact_backfills.backfill import BackfillRequest, observe_landing, run_backfill, run_restatement
from exact_backfills.checks import (
    BUILT_BY_CURRENT_CODE,
    FINGERPRINT,
    KEYS_NOT_NULL,
    RECONCILES,
    ROW_COUNT_CHANGE,
    UNIQUE_KEY,
    UP_TO_DATE,
)
from exact_backfills.dagster_names import LANDING_STATE_TAG, PIPELINE_TAG, PLAN_JOB, RESTATE_JOB
from exact_backfills.definitions import defs
from examples.ml_features.generate import generate as generate_ml
from examples.ml_features.pipeline import STG_APP_EVENTS, TRAINING_SET, USER_DAILY_FEATURES
from examples.ml_features.pipeline import pipeline as ML
from examples.ml_features.sources import APP_EVENTS
from resources import audit, control
from resources.delta_io import read_days, read_table
from resources.lake import REPO_ROOT, table_path
from tests.support.attacker import ATTACKS, page_of_another_origin
from tests.support.browser import dagster_ui
from tests.support.dagster_ui import UI_LOG, DagsterDev, instance_at
from tests.support.lake import TABLE_KEYS, duplicate_keys, environment, rows, versions
from tests.support.late_batches import (
    ORDER_TABLES,
    assert_rewrote_exactly,
    land_batch,
    next_batch_day,
    snapshot,
    three_corrected_and_two_late_days,
)
from tests.support.orders import FACT_ORDER_ITEM, ORDERS, PUBLISH_ORDER, QUARANTINE_ORDER_ITEMS, TABLES
from tests.support.projects import CHECK_CODE_VERSIONS, FEATURE_ROUNDING_FIX, MAX_QUANTITY, project_with, run_commands

pytestmark = [pytest.mark.slow, pytest.mark.daemon]

START, DAYS, UI_DAYS, CHUNK, ML_DAYS = date(2025, 1, 1), 90, 30, 15, 40
ALL_DAYS = {"Passed": DAYS, "Failed": 0, "Missing": 0}


def _checks() -> dict[str, list[str]]:
    """Each table's checks (the landing's checks are not the tables')."""
    graph = defs.resolve_asset_graph()
    by_table: dict[str, list[str]] = {}
    for key in sorted(graph.asset_check_keys, key=lambda k: (k.asset_key.to_user_string(), k.name)):
        if key.asset_key in graph.materializable_asset_keys:
            by_table.setdefault(key.asset_key.to_user_string(), []).append(key.name)
    return by_table


# The ML pipeline's labels land up to 110 days after their day: a restatement window that holds them.
WINDOW = {"RESTATEMENT_WINDOW_DAYS": "200"}


@pytest.fixture(scope="module")
def dagster_dev(spark, lake):
    """Both pipelines in one lake and one Dagster instance, a code location each (examples/workspace.yaml)."""
    root, _ = lake
    end = START + timedelta(days=DAYS - 1)
    generate(spark, START, end, seed=5, rows_per_day=20)
    generate_ml(spark, START, START + timedelta(days=ML_DAYS - 1), seed=5, rows_per_day=12)
    home = root / "dagster_dev_home"
    with instance_at(home) as instance, environment(**WINDOW):
        # What `generate`, `backfill` and `restate` do, in-process and recorded in the instance the webserver reads:
        # the landing observed, the history built in one run, then the restatement the sensor then does not repeat.
        for pipeline in (ORDERS, ML):
            assert observe_landing(pipeline, instance).success
            assert run_backfill(
                BackfillRequest(pipeline, START, end, chunk_size=DAYS), instance=instance, echo=lambda _: None
            )
            assert run_restatement(pipeline, instance).success
    dev = DagsterDev(
        home,
        env={
            "LAKE_ROOT": str(root),
            "BACKFILL_MAX_PARTITIONS_PER_RUN": str(CHUNK),
            "LATE_DATA_SENSOR_INTERVAL_S": "5",
            **WINDOW,
        },
        workspace=REPO_ROOT / "examples" / "workspace.yaml",
    )
    try:
        dev.wait_until_up()
        dev.graphql("mutation { setNuxSeen }")  # the community sign-up dialog, shown once per instance
        yield dev
    finally:
        dev.stop()


def runs_of(dev: DagsterDev, job: str, pipeline) -> list[dict]:
    """The runs of `job` of one pipeline (both code locations have a job of that name), newest first."""
    return [r for r in dev.runs(job) if {"key": PIPELINE_TAG, "value": pipeline.name} in r["tags"]]


@pytest.fixture(scope="module")
def ui(dagster_dev):
    with dagster_ui(f"http://127.0.0.1:{dagster_dev.port}", dagster_dev.credentials) as ui:
        yield ui


@pytest.fixture(autouse=True)
def _page_left_after_each_test(request):
    """A Dagster page left open keeps polling the webserver and rendering what comes back (software rendering): on
    two cores, minutes of CPU over the module. Each test opens what it reads."""
    yield
    if "ui" in request.fixturenames:
        request.getfixturevalue("ui").leave()


def test_the_landing_shows_as_observed_with_a_data_version_for_every_landed_day(ui, lake):
    root, _ = lake
    last = (START + timedelta(days=DAYS - 1)).isoformat()
    for asset in ("landing_order_items", "landing_products"):
        ui.open(f"/assets/{asset}")
        ui.page.get_by_text("Latest observation").wait_for()
        assert "Never observed" not in ui.page.locator("body").inner_text()
    ui.open("/assets/landing_order_items?view=events")
    ui.page.get_by_text(last, exact=True).first.wait_for()  # one observation per landed day, newest first
    ui.screenshot("landing-observed")
    with instance_at(root / "dagster_dev_home") as instance:
        observed = instance.fetch_observations(AssetKey("landing_order_items"), limit=10_000).records
    versions = {r.partition_key: r.asset_observation.data_version for r in observed}
    assert len(versions) == DAYS and all(versions.values())


def test_a_page_of_another_origin_drives_no_mutation_of_the_ui_which_still_answers_its_own(
    dagster_dev, lake, ui, tmp_path
):
    """The UI answers its user from its own pages only: a page on another port of this machine, shown in the browser
    that holds the UI's password, launches no run and deletes none, by any means a page has (and the UI still works:
    every test after this one uses it); without the password, nothing answers."""
    root, _ = lake
    base = f"http://127.0.0.1:{dagster_dev.port}"
    with instance_at(root / "dagster_dev_home") as instance:
        victim = instance.get_runs(limit=1)[0].run_id
        ui.open("/runs")
        ui.page.get_by_text("Runs").first.wait_for()
        with page_of_another_origin(base, victim, tmp_path, location="orders") as attacker:
            ui.page.goto(attacker)
            ui.page.wait_for_function("() => window.said !== undefined", timeout=120_000)
            said = ui.page.evaluate("() => window.said")
        launched = instance.get_runs(RunsFilter(tags={"attack": list(ATTACKS)}))
        assert (said["websocket"], launched, instance.get_run_by_id(victim) is None) == ("refused", [], False)
    # Whoever sends it, with the password: a query in a GET's query string is refused, in one line. Without the
    # password (another user of the machine), nothing answers.
    query = urllib.parse.quote("{ version }")
    password = "Basic " + base64.b64encode(":".join(dagster_dev.credentials).encode()).decode()
    for headers, status in (({"Authorization": password}, 403), ({}, 401)):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(f"{base}/graphql?query={query}", headers=headers), timeout=30)
        said = refused.value.read().decode()
        assert refused.value.code == status and said.startswith("refused: ") and said.count("\n") == 1, said
    for path in ("/", "/server_info"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(base + path, timeout=30)
        assert refused.value.code == 401, path


def test_the_uis_log_holds_no_password(dagster_dev):
    """Started without a terminal (its output goes to a log), the UI says it made a password, and where it is kept,
    without showing it."""
    said = (dagster_dev.home / UI_LOG).read_text()
    assert "a new password (not shown: no terminal)" in said, said[:2000]
    assert dagster_dev.credentials[1] not in said


def test_a_30_day_backfill_from_the_materialize_dialog_runs_in_chunks_and_changes_nothing_it_reruns(
    spark, dagster_dev, ui
):
    before = {table: rows(spark, table) for table in TABLE_KEYS}
    last = START + timedelta(days=UI_DAYS - 1)

    backfill_id, dialog = ui.launch_backfill("orders", START.isoformat(), last.isoformat())
    # Every asset has the same policy, yet the dialog says they vary: the UI compares the policies by reference
    # (docs/architecture.md). When this fails, Dagster has fixed it: drop the README's and the docs' note.
    assert "using varying backfill policies" in dialog
    ui.leave()  # no page polling while the backfill runs (see _page_left_after_each_test); then its page, as it ends
    dagster_dev.wait_for_backfill(backfill_id)
    page = ui.backfill_page(backfill_id, until="Succeeded")
    ui.screenshot("backfill-succeeded")

    assert "\nStatus\nSucceeded\n" in page, page[:600]
    for asset in [*PUBLISH_ORDER, QUARANTINE_ORDER_ITEMS]:
        assert f"{asset}\n{asset}\n100% completed\n{UI_DAYS}\n0\n{UI_DAYS}\n0" in page, f"{asset} not shown complete"
    backfill = dagster_dev.wait_for_backfill(backfill_id)
    # Chunked: a few runs of at most CHUNK days, never one run per day.
    ranges = set()
    for run in backfill["runs"]:
        tags = {t["key"]: t["value"] for t in run["tags"]}
        first = date.fromisoformat(tags["dagster/asset_partition_range_start"])
        end = date.fromisoformat(tags["dagster/asset_partition_range_end"])
        assert (end - first).days + 1 <= CHUNK
        ranges.add((first, end))
    assert len(backfill["runs"]) < UI_DAYS // 2
    covered = {first + timedelta(days=i) for first, end in ranges for i in range((end - first).days + 1)}
    assert covered == {START + timedelta(days=i) for i in range(UI_DAYS)}

    for table in TABLE_KEYS:
        assert duplicate_keys(spark, table) == 0, table
        assert rows(spark, table) == before[table], f"{table}: re-running the range changed its content"
    # The sensor waited for the backfill and did not repeat the restatement `restate` did for this landing.
    assert len(runs_of(dagster_dev, RESTATE_JOB, ORDERS)) == 1


_CHECK_DAYS = """query ($path: [String!]!) { assetNodeOrError(assetKey: {path: $path}) { ... on AssetNode {
  assetChecksOrError { ... on AssetChecks { checks { name partitionStatuses {
    ... on AssetCheckTimePartitionStatuses { ranges { startKey endKey status } } } } } } } } }"""
# The words of a check's Partitions view for the statuses Dagster's API gives its day ranges.
_SHOWN_AS = {"SUCCEEDED": "Passed", "FAILED": "Failed", "EXECUTION_FAILED": "Failed"}


def check_days(dev: DagsterDev, table: str) -> dict[str, dict[str, int]]:
    """Each check of `table`: its days per status, as its Partitions view counts them, from the webserver's GraphQL
    API, which that view reads (days with no result are Missing)."""
    node = dev.graphql(_CHECK_DAYS, {"path": [table]})["assetNodeOrError"]
    by_check = {}
    for check in node["assetChecksOrError"]["checks"]:
        seen = {"Passed": 0, "Failed": 0}
        for r in (check["partitionStatuses"] or {}).get("ranges", []):
            shown, first = _SHOWN_AS.get(r["status"], r["status"]), date.fromisoformat(r["startKey"])
            seen[shown] = seen.get(shown, 0) + (date.fromisoformat(r["endKey"]) - first).days + 1
        by_check[check["name"]] = {**seen, "Missing": DAYS - sum(seen.values())}
    return by_check


def days_with(dev: DagsterDev, table: str, check: str, status: str) -> list[str]:
    """The days for which the webserver's API gives `table`'s `check` the status `status` (FAILED, SUCCEEDED...)."""
    node = dev.graphql(_CHECK_DAYS, {"path": [table]})["assetNodeOrError"]
    (found,) = [c for c in node["assetChecksOrError"]["checks"] if c["name"] == check]
    days = []
    for r in (found["partitionStatuses"] or {}).get("ranges", []):
        first, end = date.fromisoformat(r["startKey"]), date.fromisoformat(r["endKey"])
        days += [
            (first + timedelta(days=n)).isoformat() for n in range((end - first).days + 1) if r["status"] == status
        ]
    return sorted(days)


def test_every_table_shows_every_day_materialized_and_every_check_every_day_passed(dagster_dev, ui):
    """Every table's Partitions view in the browser; every check of the fact's own view too, and every other table's
    checks from the API that view reads (a page per check was minutes of the suite)."""
    for table, checks in _checks().items():
        assert ui.asset_partitions(table, {"Materialized": DAYS, "Missing": 0}) == {
            "Failed": 0,
            "Materialized": DAYS,
            "Materializing": 0,
            "Missing": 0,
        }, table
        assert check_days(dagster_dev, table) == dict.fromkeys(checks, ALL_DAYS), table
    for check in _checks()[FACT_ORDER_ITEM]:
        seen = ui.check_partitions(FACT_ORDER_ITEM, check, ALL_DAYS)
        assert {k: seen.get(k) for k in ALL_DAYS} == ALL_DAYS, (check, seen)
    ui.check_partitions(FACT_ORDER_ITEM, UNIQUE_KEY, ALL_DAYS)
    ui.screenshot("check-partitions-passed")


def test_the_checks_that_gate_a_publish_show_as_blocking_and_the_others_do_not(ui):
    for check in (UNIQUE_KEY, KEYS_NOT_NULL, RECONCILES):
        assert "This is a blocking asset check" in ui.check_overview("fact_order_item", check), check
    for check in (FINGERPRINT, ROW_COUNT_CHANGE, UP_TO_DATE):
        assert "This is a non-blocking asset check" in ui.check_overview("fact_order_item", check), check


def test_each_days_materialization_shows_that_days_own_rows(spark, ui):
    day = START + timedelta(days=7)
    panel = ui.asset_day(FACT_ORDER_ITEM, day.isoformat())
    rows_on_day = read_days(spark, FACT_ORDER_ITEM, "order_date", [day]).count()
    assert f"rows_written\n{rows_on_day}\n" in panel, panel
    for figure in ("files_added", "delta_version", "fingerprint"):
        assert f"\n{figure}\n" in panel, (figure, panel)


def test_every_table_shows_its_freshness_policy_evaluated_and_passing_after_the_backfill(ui):
    for table in [t.name for t in TABLES]:
        assert ui.freshness(table) == "Passing", table
    ui.screenshot("freshness-passing")


def test_a_duplicate_written_behind_the_pipelines_back_shows_its_day_failed_with_the_numbers(spark, lake, ui, capsys):
    root, _ = lake
    day = START + timedelta(days=40)
    read_days(spark, "fact_order_item", "order_date", [day]).limit(1).write.format("delta").mode("append").save(
        table_path("fact_order_item")
    )

    with instance_at(root / "dagster_dev_home"):
        exit_code = cli.main(["check", "--asset", "fact_order_item", "--start", str(day), "--end", str(day)])
    printed = capsys.readouterr().out
    assert exit_code == 1
    assert f"FAIL {UNIQUE_KEY} {day}: " in printed, printed

    seen = ui.check_partitions("fact_order_item", UNIQUE_KEY, {"Failed": 1, "Passed": DAYS - 1})
    assert (seen["Failed"], seen["Passed"]) == (1, DAYS - 1), seen
    status, panel = ui.day_result(day.isoformat())
    ui.screenshot("check-day-failed")
    assert status == "Failed"
    assert "duplicate_rows\n1\n" in panel and "sample_duplicate_keys\norder_id=" in panel, panel

    # Rebuilding the day puts it right, and the view says so.
    with instance_at(root / "dagster_dev_home") as instance:
        assert run_backfill(BackfillRequest(ORDERS, day, day), instance=instance, echo=lambda _: None)
    seen = ui.check_partitions("fact_order_item", UNIQUE_KEY, ALL_DAYS)
    assert (seen["Failed"], seen["Passed"]) == (0, DAYS), seen


def test_a_check_that_could_not_run_shows_failed_on_its_days_saying_why_never_passed(lake, ui, capsys):
    root, _ = lake
    table, first, last = "daily_category_revenue", START + timedelta(days=10), START + timedelta(days=12)
    checked = ["check", "--asset", table, "--start", str(first), "--end", str(last)]
    # The table unreadable while it is checked (its folder moved away): no check of it can be evaluated.
    path = Path(table_path(table))
    path.rename(path.with_name(f"{table}.away"))
    try:
        with instance_at(root / "dagster_dev_home"):
            exit_code = cli.main(checked)
    finally:
        path.with_name(f"{table}.away").rename(path)
    printed = capsys.readouterr().out
    assert exit_code == 1
    assert f"FAIL {UNIQUE_KEY} {first}: could not be evaluated: TableNotMaterialized: " in printed, printed
    # Its up-to-date and code checks read other tables and still ran; the five that read it failed, on each day.
    assert f"{table}: 6/21 check results passed over {first}..{last}" in printed, printed

    seen = ui.check_partitions(table, UNIQUE_KEY, {"Failed": 3, "Passed": DAYS - 3})
    assert (seen["Failed"], seen["Passed"]) == (3, DAYS - 3), seen
    status, panel = ui.day_result(first.isoformat())
    ui.screenshot("check-could-not-run")
    assert status == "Failed" and "could not be evaluated" in panel and "does not exist" in panel, panel

    # Readable again, the same check passes on those days, and the view says so.
    with instance_at(root / "dagster_dev_home"):
        assert cli.main(checked) == 0
    capsys.readouterr()
    seen = ui.check_partitions(table, UNIQUE_KEY, ALL_DAYS)
    assert (seen["Failed"], seen["Passed"]) == (0, DAYS), seen


def test_a_late_batch_shows_exactly_its_days_stale_then_passed_after_the_sensors_restatement(
    spark, dagster_dev, lake, ui
):
    root, _ = lake
    ui.set_sensor("late_data_sensor", running=False)
    items, expected = three_corrected_and_two_late_days(spark, START + timedelta(days=40))
    stale_days = sorted(d.isoformat() for d in expected)
    before = snapshot(spark)
    batch = next_batch_day()
    ingested = land_batch(spark, items, batch)

    # Observing the landing (its "Observe" button) shows, before anything is rewritten, exactly the stale days: in
    # the fact's Partitions view, each day's panel saying why; every order table's days from the API that view reads
    # (a view per table was a minute of the suite).
    observation = dagster_dev.wait_for_run(None, run_id=ui.observe("landing_order_items"))
    assert observation["status"] == "SUCCESS"
    for table in ORDER_TABLES:
        assert days_with(dagster_dev, table, UP_TO_DATE, "FAILED") == stale_days, table
    seen = ui.check_partitions(FACT_ORDER_ITEM, UP_TO_DATE, {"Failed": len(expected), "Passed": DAYS - len(expected)})
    assert (seen["Failed"], seen["Passed"]) == (len(expected), DAYS - len(expected)), seen
    for day in stale_days:
        status, panel = ui.day_result(day)
        assert status == "Failed", (day, panel)
        assert "key(s) added or corrected" in panel and str(batch) in panel, panel  # why, and which batch
    ui.check_partitions(FACT_ORDER_ITEM, UP_TO_DATE, {"Failed": len(expected)})
    ui.screenshot("late-batch-stale-days")

    ui.set_sensor("late_data_sensor", running=True)
    ui.leave()
    run = dagster_dev.wait_for_run(RESTATE_JOB, (LANDING_STATE_TAG, landing_state(ORDERS)))

    assert run["status"] == "SUCCESS"
    # One restatement: one commit per order table, on exactly the 5 days.
    assert_rewrote_exactly(spark, before, expected)
    quantities = {(r.order_id, r.order_item_id): r.quantity for r in read_table(spark, "fact_order_item").collect()}
    assert all(quantities[(r[0], r[1])] == r[6] for r in items)
    assert control.read_watermark(spark, ORDERS.name).watermark_ts == ingested.replace(tzinfo=None)
    for table in ORDER_TABLES:
        assert check_days(dagster_dev, table)[UP_TO_DATE] == ALL_DAYS, table
    seen = ui.check_partitions(FACT_ORDER_ITEM, UP_TO_DATE, ALL_DAYS)
    assert (seen["Failed"], seen["Passed"]) == (0, DAYS), seen
    ui.screenshot("late-batch-restated")


def test_a_rolled_back_restatement_shows_each_day_restored_and_held_until_released(
    spark, dagster_dev, lake, ui, capsys
):
    root, _ = lake
    restatement = runs_of(dagster_dev, RESTATE_JOB, ORDERS)[0]  # the sensor's, of the late batch above
    restated = sorted(
        {r.partition for r in audit.read(spark, ORDERS.name).where(f"run_id = '{restatement['runId']}'").collect()}
    )
    day = restated[0].isoformat()
    with instance_at(root / "dagster_dev_home"):
        assert cli.main(["rollback", "--start", day, "--end", day, "--before-run", restatement["runId"]]) == 0
    capsys.readouterr()

    # The day's latest materialization is the rollback's, saying what it restored; its check results say it is held.
    panel = ui.asset_day(FACT_ORDER_ITEM, day)
    assert "restored_to_version\n" in panel and f"rolled back to before run {restatement['runId']}" in panel, panel
    seen = ui.check_partitions(FACT_ORDER_ITEM, UP_TO_DATE, ALL_DAYS)
    assert (seen["Failed"], seen["Passed"]) == (0, DAYS), seen
    status, panel = ui.day_result(day)
    ui.screenshot("rolled-back-day-held")
    assert status == "Passed" and "held since" in panel, panel

    with instance_at(root / "dagster_dev_home"):
        assert cli.main(["release", "--start", day, "--end", day]) == 0
    assert control.open_holds(spark, ORDERS.name) == []
    assert "restored_to_version" not in ui.asset_day(FACT_ORDER_ITEM, day)


def test_a_fixed_transform_shows_exactly_the_days_it_makes_stale_failing_built_by_current_code(lake, ui, tmp_path):
    root, _ = lake
    # The fixed code's check, recorded in the instance the UI reads, as the fixed code location's sensor launches it.
    fixed = project_with(tmp_path / "fixed", FEATURE_ROUNDING_FIX)
    run_commands(fixed, CHECK_CODE_VERSIONS, DAGSTER_HOME=str(root / "dagster_dev_home"))

    for table in PUBLISH_ORDER:
        expected = {"Failed": DAYS, "Passed": 0} if table == "customer_daily_features" else ALL_DAYS
        seen = ui.check_partitions(table, BUILT_BY_CURRENT_CODE, expected)
        assert {k: seen.get(k, 0) for k in expected} == expected, (table, seen)
    ui.check_partitions("customer_daily_features", BUILT_BY_CURRENT_CODE, {"Failed": DAYS})
    status, panel = ui.day_result((START + timedelta(days=DAYS - 1)).isoformat())
    ui.screenshot("code-stale-days")
    assert status == "Failed" and "customer_daily_features: code changed (" in panel, panel


def test_the_resources_page_shows_the_settings_the_runs_use(ui, lake):
    root, _ = lake
    lines = ui.resource("settings").splitlines()
    for field, value in [
        ("backfill_max_partitions_per_run", str(CHUNK)),
        ("lake_root", str(root)),
        ("partition_start_date", "2025-01-01"),
        ("late_data_sensor_interval_s", "5"),
    ]:
        at = lines.index(field)
        shown = [line.strip('"') for line in lines[at + 1 : at + 4]]  # its description, type and value (text quoted)
        assert value in shown, (field, value, lines[at : at + 4])
    # With the variable each is read from.
    assert "BACKFILL_MAX_PARTITIONS_PER_RUN: the most days one backfill run covers" in lines
    ui.screenshot("settings-resource")


def test_the_terminal_of_the_ui_shows_no_line_per_event(dagster_dev, lake):
    root, _ = lake
    printed = (root / "dagster_dev_home" / UI_LOG).read_text()
    assert " - DEBUG - " not in printed and "STEP_START" not in printed
    assert "Found a dagster instance configuration value" not in printed


# The ML pipeline, its own code location and group in the same instance and lake.


def _ml_checks(table: str) -> list[str]:
    """The checks the ML tests look at per table: keys, freshness, reconciliation and the user's own."""
    declared = ML.by_name[table]
    return [UNIQUE_KEY, UP_TO_DATE, *([RECONCILES] if declared.reconcile else []), *(c.name for c in declared.checks)]


def test_a_mart_gaining_a_column_shows_its_schema_diff_in_the_plans_run_and_once_promoted_the_column_in_the_asset(
    lake, dagster_dev, ui, tmp_path
):
    """The last of the orders pipeline's tests: its lake's mart then has a column the repository's code does not."""
    root, _ = lake
    wider = project_with(tmp_path / "wider", MAX_QUANTITY)
    every_day = ["--start", str(START), "--end", str(START + timedelta(days=DAYS - 1))]
    planned, promoted = run_commands(
        wider,
        ["plan", "--select", "daily_revenue", *every_day, "--json"],
        ["promote", "{plan_id}"],
        DAGSTER_HOME=str(root / "dagster_dev_home"),
    )
    assert planned.code == 0 and promoted.code == 0, planned.err + promoted.err

    plan_run = runs_of(dagster_dev, PLAN_JOB, ORDERS)[0]["runId"]
    diff = ui.run_markdown(plan_run, "daily_revenue")
    ui.screenshot("plan-schema-diff")
    assert "columns: added max_quantity (int)" in diff and f"{DAYS} day(s) change" in diff, diff
    columns = ui.columns("daily_revenue")
    ui.screenshot("asset-new-column")
    assert "max_quantity" in columns and "net_amount" in columns, columns


def test_the_ml_pipeline_a_second_location_backfills_a_range_from_its_groups_dialog_changing_nothing(
    spark, dagster_dev, ui
):
    before = {table: rows(spark, table) for table in ML.every_table}
    orders_versions = {t: versions(spark, t) for t in PUBLISH_ORDER}
    last = START + timedelta(days=UI_DAYS - 1)
    backfill_id, _ = ui.launch_backfill(
        "ml_features", START.isoformat(), last.isoformat(), location="ml_features", shot="ml-launch-backfill"
    )
    ui.leave()
    dagster_dev.wait_for_backfill(backfill_id)
    page = ui.backfill_page(backfill_id, until="Succeeded")
    for asset in ML.every_table:
        assert f"{asset}\n{asset}\n100% completed\n{UI_DAYS}\n0\n{UI_DAYS}\n0" in page, f"{asset} not shown complete"
    assert {table: rows(spark, table) for table in ML.every_table} == before
    # The orders pipeline's tables, in the same lake, were not touched.
    assert {t: versions(spark, t) for t in PUBLISH_ORDER} == orders_versions


def test_every_ml_table_shows_every_day_materialized_and_its_checks_passed_the_users_own_included(dagster_dev, ui):
    """Every table's Partitions view and each user's own check's in the browser, the other checks from the API."""
    for table in ML.publish_order:
        assert ui.asset_partitions(table, {"Materialized": DAYS, "Missing": 0})["Materialized"] == DAYS, table
        shown = check_days(dagster_dev, table)
        assert {c: shown[c] for c in _ml_checks(table)} == dict.fromkeys(_ml_checks(table), ALL_DAYS), table
        for check in ML.by_name[table].checks:
            seen = ui.check_partitions(table, check.name, ALL_DAYS)
            assert {k: seen.get(k) for k in ALL_DAYS} == ALL_DAYS, (table, check.name, seen)
    status, panel = ui.day_result((START + timedelta(days=5)).isoformat())
    ui.screenshot("ml-user-check-passed")
    assert status == "Passed" and "active\n" in panel and "labelled\n" in panel, panel


def test_a_late_event_shows_its_day_and_the_six_after_stale_then_passed_after_the_sensors_restatement(
    spark, dagster_dev, ui
):
    ui.set_sensor("late_data_sensor", running=False, location="ml_features")
    day = START + timedelta(days=10)
    window = {day + timedelta(days=i) for i in range(7)}
    expected = {STG_APP_EVENTS: {day}, USER_DAILY_FEATURES: window, TRAINING_SET: window}
    before = snapshot(spark, ML.every_table, ML.day_columns)
    batch = next_batch_day(APP_EVENTS)
    land_batch(spark, [("late-ui", 2, day, "purchase", Decimal("30.00"), None)], batch, APP_EVENTS)

    observation = dagster_dev.wait_for_run(None, run_id=ui.observe("landing_app_events"))
    assert observation["status"] == "SUCCESS"
    for table, days in expected.items():
        seen = ui.check_partitions(table, UP_TO_DATE, {"Failed": len(days), "Passed": DAYS - len(days)})
        assert (seen["Failed"], seen["Passed"]) == (len(days), DAYS - len(days)), (table, seen)
    status, panel = ui.day_result((day + timedelta(days=6)).isoformat())
    ui.screenshot("ml-late-event-stale-window")
    assert status == "Failed" and f"trailing window of the change on {day}" in panel, panel

    ui.set_sensor("late_data_sensor", running=True, location="ml_features")
    ui.leave()
    run = dagster_dev.wait_for_run(RESTATE_JOB, (LANDING_STATE_TAG, landing_state(ML)))
    assert run["status"] == "SUCCESS"
    assert_rewrote_exactly(spark, before, expected, tables=list(expected), day_column=ML.day_columns)
    for table in expected:
        assert check_days(dagster_dev, table)[UP_TO_DATE] == ALL_DAYS, table
    seen = ui.check_partitions(TRAINING_SET, UP_TO_DATE, ALL_DAYS)
    assert (seen["Failed"], seen["Passed"]) == (0, DAYS), seen
