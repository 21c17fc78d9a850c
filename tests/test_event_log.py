"""The project's event log storage writes a range run's per-day events in batches, and what it stores reads back
exactly as Dagster's own storage stores it event by event: materialized and planned partitions, each asset's latest
run and materialization, and every check's planned and evaluated partitions."""

import os
import warnings

import pytest
from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckSpec,
    AssetKey,
    AssetSpec,
    BackfillPolicy,
    DagsterInstance,
    DailyPartitionsDefinition,
    Definitions,
    MaterializeResult,
    define_asset_job,
    in_process_executor,
    multi_asset,
)
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from resources.event_log import EVENT_BATCH_SIZE, PooledSqliteEventLogStorage

warnings.filterwarnings("ignore")  # partitioned checks and BackfillPolicy are preview/beta in Dagster 1.13

PARTITIONS = DailyPartitionsDefinition(start_date="2025-01-01", end_date="2025-01-08")
KEYS = [AssetKey("upstream"), AssetKey("downstream")]
NOT_EVALUATED = "2025-01-05"
STOCK = {"module": "dagster._core.storage.event_log", "class": "ConsolidatedSqliteEventLogStorage"}
POOLED = {"module": "resources.event_log", "class": "PooledSqliteEventLogStorage"}


def _table(name: str, deps: list[str]):
    @multi_asset(
        name=name,
        specs=[AssetSpec(name, deps=deps)],
        check_specs=[AssetCheckSpec("rows_match", asset=name, partitions_def=PARTITIONS)],
        partitions_def=PARTITIONS,
        backfill_policy=BackfillPolicy.single_run(),
        can_subset=True,
    )
    def table(context):
        for day in [d for d in context.partition_keys if d != NOT_EVALUATED]:  # that day's row stays as planned
            context.log_event(AssetCheckEvaluation(asset_key=AssetKey(name), check_name="rows_match", passed=day != "2025-01-03", partition=day))
        yield MaterializeResult(asset_key=name, metadata={"days": len(context.partition_keys)})

    return table


DEFS = Definitions(assets=[_table("upstream", []), _table("downstream", ["upstream"])], jobs=[define_asset_job("all")], executor=in_process_executor)


def _stored(storage: dict, tmp_path, monkeypatch, batch_size: str) -> dict:
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", batch_size)
    home = tmp_path / storage["class"]
    home.mkdir()
    overrides = {"telemetry": {"enabled": False}, "event_log_storage": {**storage, "config": {"base_dir": str(home)}}}
    with DagsterInstance.local_temp(str(home), overrides=overrides) as instance:
        keys = PARTITIONS.get_partition_keys()
        tags = {ASSET_PARTITION_RANGE_START_TAG: keys[1], ASSET_PARTITION_RANGE_END_TAG: keys[-2]}
        run_id = DEFS.resolve_job_def("all").execute_in_process(instance=instance, tags=tags).run_id
        stored = {}
        for key in KEYS:
            record = instance.get_asset_records([key])[0].asset_entry
            checks = instance.event_log_storage.get_asset_check_execution_history(AssetCheckKey(key, "rows_match"), limit=100)
            stored[key] = {
                "materialized": sorted(instance.get_materialized_partitions(key)),
                "materializations": sorted(r.partition_key for r in instance.fetch_materializations(key, limit=100).records),
                "planned": sorted(r.partition_key for r in instance.fetch_planned_materializations(key, limit=100).records),
                "last_run_is_the_run": record.last_run_id == run_id,
                "last_materialization": record.last_materialization_record.partition_key,
                "checks": sorted((c.partition, c.status.value, c.run_id == run_id, c.event.dagster_event_type.value) for c in checks),
            }
        return stored


def test_a_range_runs_events_stored_in_batches_read_back_as_dagster_stores_them_one_by_one(tmp_path, monkeypatch):
    batched = _stored(POOLED, tmp_path, monkeypatch, batch_size="1000")
    one_by_one = _stored(STOCK, tmp_path, monkeypatch, batch_size="0")

    assert batched == one_by_one
    days = PARTITIONS.get_partition_keys()[1:-1]
    assert batched[KEYS[1]]["materialized"] == days
    assert batched[KEYS[1]]["last_materialization"] == days[-1]
    assert ("2025-01-03", "FAILED", True, "ASSET_CHECK_EVALUATION") in batched[KEYS[0]]["checks"]
    assert (NOT_EVALUATED, "PLANNED", True, "ASSET_CHECK_EVALUATION_PLANNED") in batched[KEYS[0]]["checks"]


@pytest.mark.parametrize("preset", [None, "0"])
def test_the_project_storage_turns_batching_on_unless_the_user_set_it(tmp_path, monkeypatch, preset):
    if preset is None:
        monkeypatch.delenv("DAGSTER_EVENT_BATCH_SIZE", raising=False)
    else:
        monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", preset)
    PooledSqliteEventLogStorage(str(tmp_path)).dispose()
    assert os.environ["DAGSTER_EVENT_BATCH_SIZE"] == (preset or EVENT_BATCH_SIZE)
