"""The names assets_pkg/dagster_private.py takes from Dagster's private modules still exist and still mean what the
project relies on. When one of these fails, Dagster changed it: look for the public API that replaces it."""

from dagster import (
    AssetExecutionContext,
    AssetObservation,
    BackfillPolicy,
    DagsterInstance,
    DailyPartitionsDefinition,
    Definitions,
    asset,
    define_asset_job,
)

from assets_pkg.dagster_private import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    DATA_VERSION_TAG,
    PARTITION_NAME_TAG,
    AssetCheckEvaluationTargetMaterializationData,
    BulkActionStatus,
)


def test_a_check_results_pointer_to_the_materialization_it_checked_has_the_fields_recording_fills_in():
    pointer = AssetCheckEvaluationTargetMaterializationData(storage_id=1, run_id="r", timestamp=0.0)
    assert (pointer.storage_id, pointer.run_id, pointer.timestamp) == (1, "r", 0.0)


def test_an_observation_carries_its_data_version_in_the_tag():
    assert AssetObservation("landing", partition="2025-01-01", tags={DATA_VERSION_TAG: "v1"}).data_version == "v1"


def test_a_requested_backfill_is_one_in_progress():
    assert BulkActionStatus.REQUESTED.value == "REQUESTED"


def test_the_partition_tags_give_a_run_its_days():
    seen = []
    days = DailyPartitionsDefinition(start_date="2025-01-01", end_date="2025-01-10")

    @asset(partitions_def=days, backfill_policy=BackfillPolicy.single_run())
    def table(context: AssetExecutionContext) -> None:
        seen.append(context.partition_keys)

    job = Definitions(assets=[table], jobs=[define_asset_job("j")]).resolve_job_def("j")
    with DagsterInstance.ephemeral() as instance:
        job.execute_in_process(instance=instance, tags={ASSET_PARTITION_RANGE_START_TAG: "2025-01-02",
                                                         ASSET_PARTITION_RANGE_END_TAG: "2025-01-04"})
        job.execute_in_process(instance=instance, tags={PARTITION_NAME_TAG: "2025-01-07"})
    assert seen == [["2025-01-02", "2025-01-03", "2025-01-04"], ["2025-01-07"]]


def test_each_beta_or_preview_api_the_project_silences_still_warns():
    import warnings

    from dagster import AssetCheckSpec, DataVersion, DataVersionsByPartition, observable_source_asset

    from assets_pkg import RELIED_ON

    uses = {
        "observable_source_asset": lambda: observable_source_asset(lambda: None),
        "DataVersionsByPartition": lambda: DataVersionsByPartition({"2025-01-01": DataVersion("v")}),
        "partitions_def on an AssetCheckSpec": lambda: AssetCheckSpec(
            "c", asset="a", partitions_def=DailyPartitionsDefinition(start_date="2025-01-01")),
    }
    assert set(uses) == {name for names in RELIED_ON.values() for name in names}
    for category, names in RELIED_ON.items():
        for name in names:
            with warnings.catch_warnings(record=True) as caught:
                warnings.resetwarnings()
                warnings.simplefilter("always")
                uses[name]()
            assert any(issubclass(w.category, category) and name in str(w.message) for w in caught), name
