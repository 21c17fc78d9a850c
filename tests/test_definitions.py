"""The whole code location loads, and every asset is daily-partitioned with a chunked backfill policy."""

from datetime import timedelta

import pytest
from dagster import AssetKey, Definitions, FreshnessPolicy, in_process_executor

from exact_backfills import checks, clock
from exact_backfills.assets import freshness_policy
from exact_backfills.dagster_names import ALL_ASSETS_JOB, RESTATE_JOB
from exact_backfills.definitions import defs
from exact_backfills.location import definitions_of
from exact_backfills.partitions import max_partitions_per_run
from resources.spark import LOCAL_JAVA_OPTIONS, SHORT_RUN_JAVA_OPTIONS
from tests.support import visits
from tests.support.lake import environment
from tests.support.orders import DAY_COLUMN, ORDERS, TABLES


def test_every_declared_table_is_a_daily_partitioned_asset_with_a_chunked_backfill_policy_and_its_checks():
    graph = defs.resolve_asset_graph()
    names = {k.to_user_string() for k in graph.materializable_asset_keys}
    assert names == set(DAY_COLUMN)  # every table, side tables included, and nothing else
    for table in TABLES:
        parents = {k.to_user_string() for k in graph.get(AssetKey(table.name)).parent_keys}
        assert set(ORDERS.upstream_assets(table.name)) == parents
        declared = {k.name for k in graph.asset_check_keys if k.asset_key == AssetKey(table.name)}
        assert set(checks.names(table)) <= declared, table.name
    for key in graph.materializable_asset_keys:
        node = graph.get(key)
        assert node.partitions_def == ORDERS.partitions.definition, key
        assert node.backfill_policy.max_partitions_per_run == max_partitions_per_run(), key


def test_the_landing_is_an_observed_daily_partitioned_source_of_the_tables_that_read_it():
    graph = defs.resolve_asset_graph()
    landing = {k.to_user_string() for k in graph.get_all_asset_keys() - graph.materializable_asset_keys}
    assert landing == {"landing_order_items", "landing_products"}
    assert all(graph.get(AssetKey(name)).partitions_def == ORDERS.partitions.definition for name in landing)
    assert AssetKey("landing_order_items") in graph.get(AssetKey("stg_order_items")).parent_keys
    assert AssetKey("landing_products") in graph.get(AssetKey("dim_product")).parent_keys


def test_the_code_location_loads_as_the_webserver_loads_it():
    Definitions.validate_loadable(defs)


def test_the_partitions_are_the_configured_days():
    keys = ORDERS.partitions.definition.get_partition_keys()
    assert (keys[0], keys[-1], len(keys)) == ("2025-01-01", "2025-03-31", 90)


def _days_of(defs: Definitions) -> dict[str, tuple[str, str]]:
    """Each asset and daily check of a code location (not the landing contract's, which is of the files): its first and
    last partition key."""
    graph = defs.resolve_asset_graph()
    found = {key.to_user_string(): graph.get(key).partitions_def for key in graph.get_all_asset_keys()}
    found |= {
        f"{key.asset_key.to_user_string()}:{key.name}": graph.get_check_spec(key).partitions_def
        for key in graph.asset_check_keys
    }
    return {name: (p.get_first_partition_key(), p.get_last_partition_key()) for name, p in found.items() if p}


def test_two_pipelines_with_different_first_days_load_side_by_side_each_with_its_own_partitions():
    with environment(PARTITION_START_DATE="", PARTITION_END_DATE=""):  # unset: each pipeline's own calendar
        orders, visits_location = definitions_of(ORDERS), definitions_of(visits.pipeline)
        Definitions.validate_loadable(orders)
        Definitions.validate_loadable(visits_location)
        orders_days, visits_days = _days_of(orders), _days_of(visits_location)
    # each up to today in its own timezone (the orders pipeline's UTC, the visits' New York)
    assert set(orders_days.values()) == {("2025-01-01", clock.today("UTC").isoformat())}, orders_days
    assert set(visits_days.values()) == {("2024-12-01", clock.today("America/New_York").isoformat())}, visits_days
    assert {"landing_visits", "stg_visits", "stg_visits:unique_key"} <= set(visits_days)
    assert {"landing_order_items", "daily_revenue", "daily_revenue:unique_key"} <= set(orders_days)


def test_a_pipelines_calendar_is_read_when_its_definitions_are_loaded_not_when_it_is_imported():
    """The environment's days stand in for the calendar's from the moment they are set, whatever was imported before
    (the pipeline, its definitions module): nothing about the days is fixed at import."""
    with environment(PARTITION_START_DATE="2025-02-01"):
        moved = _days_of(definitions_of(ORDERS))
    assert set(moved.values()) == {("2025-02-01", "2025-03-31")}  # the end still the tests' PARTITION_END_DATE
    assert set(_days_of(definitions_of(ORDERS)).values()) == {("2025-01-01", "2025-03-31")}


def test_steps_of_a_run_share_one_process_and_so_one_spark_session():
    assert defs.resolve_job_def(ALL_ASSETS_JOB).executor_def == in_process_executor


_JAVA_OPTIONS_OF_RUNS = """
import json
from exact_backfills.definitions import defs
def options(job):
    pyspark = defs.resolve_job_def(job).resource_defs["pyspark"]  # the config the run's session starts with
    return pyspark.config_schema.as_field().default_value["spark_config"].get("spark.driver.extraJavaOptions")
print(json.dumps([options(job) for job in ({restate!r}, {backfill!r})]))
"""


@pytest.mark.parametrize("short_runs", ["0", "1"])
def test_restatement_runs_start_a_jvm_for_short_runs_and_backfill_runs_keep_the_default(short_runs):
    import json
    import os
    import subprocess
    import sys

    # The definitions as a code location loads them, with SPARK_SHORT_RUNS unset (a user's default) or set, each run
    # starting a driver of its own (not the warm engine, whose JVM lives long).
    code = _JAVA_OPTIONS_OF_RUNS.format(restate=RESTATE_JOB, backfill=ALL_ASSETS_JOB)
    env = {**os.environ, "SPARK_SHORT_RUNS": short_runs, "SPARK_ENGINE": "in-process"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    restate, backfill = json.loads(done.stdout.strip().splitlines()[-1])

    assert restate.startswith(f"{LOCAL_JAVA_OPTIONS} {SHORT_RUN_JAVA_OPTIONS} ")
    if short_runs == "1":
        assert backfill.startswith(f"{LOCAL_JAVA_OPTIONS} {SHORT_RUN_JAVA_OPTIONS} ")
    else:
        assert backfill.startswith(f"{LOCAL_JAVA_OPTIONS} ") and SHORT_RUN_JAVA_OPTIONS not in backfill
    # Both log through the project's log4j2 properties, not to the terminal.
    assert restate.split()[-3:] == backfill.split()[-3:] and "-Dlog4j2.configurationFile=" in backfill


def test_every_table_declares_its_freshness_so_dagster_shows_a_table_not_published_within_the_window():
    graph = defs.resolve_asset_graph()
    with environment(FRESHNESS_FAIL_WINDOW_H="30"):
        expected = freshness_policy()
    for table in TABLES:
        policy = graph.get(AssetKey(table.name)).freshness_policy
        assert policy == FreshnessPolicy.time_window(fail_window=timedelta(hours=26)), (table.name, policy)
    assert expected.fail_window.to_timedelta() == timedelta(hours=30)
