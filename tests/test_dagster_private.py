"""The names exact_backfills/dagster_private.py takes from Dagster's private modules still exist and still mean what the
project relies on. When one of these fails, Dagster changed it: look for the public API that replaces it."""

import inspect
import uuid
from datetime import UTC, date, datetime

import pytest
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

from exact_backfills.dagster_names import LAKE_WRITES_POOL, PUBLISH_STEP, implicit_asset_job_name
from exact_backfills.dagster_private import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    BACKFILL_ID_TAG,
    DATA_VERSION_TAG,
    PARTITION_NAME_TAG,
    AssetCheckEvaluationTargetMaterializationData,
    BulkActionStatus,
)
from tests.support.event_storage import assert_records_as_dagsters_own, check_execution_rows
from tests.support.slot_claims import (
    assert_one_holds_the_slot_and_the_other_gets_it_next,
    claim_while_a_rival_takes_the_slot,
)


def test_a_check_results_pointer_to_the_materialization_it_checked_has_the_fields_recording_fills_in():
    pointer = AssetCheckEvaluationTargetMaterializationData(storage_id=1, run_id="r", timestamp=0.0)
    assert (pointer.storage_id, pointer.run_id, pointer.timestamp) == (1, "r", 0.0)


def test_an_observation_carries_its_data_version_in_the_tag():
    assert AssetObservation("landing", partition="2025-01-01", tags={DATA_VERSION_TAG: "v1"}).data_version == "v1"


def test_define_asset_job_returns_the_type_the_job_factories_are_annotated_with():
    from exact_backfills.dagster_private import UnresolvedAssetJobDefinition

    assert inspect.signature(define_asset_job, eval_str=True).return_annotation is UnresolvedAssetJobDefinition
    assert isinstance(define_asset_job("j"), UnresolvedAssetJobDefinition)


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
        job.execute_in_process(
            instance=instance,
            tags={ASSET_PARTITION_RANGE_START_TAG: "2025-01-02", ASSET_PARTITION_RANGE_END_TAG: "2025-01-04"},
        )
        job.execute_in_process(instance=instance, tags={PARTITION_NAME_TAG: "2025-01-07"})
    assert seen == [["2025-01-02", "2025-01-03", "2025-01-04"], ["2025-01-07"]]


def test_an_asset_materialized_without_a_job_of_its_own_runs_as_the_implicit_asset_job():
    from exact_backfills.definitions import defs

    @asset
    def table() -> None:
        pass

    implicit = Definitions(assets=[table]).resolve_implicit_global_asset_job_def()
    with DagsterInstance.ephemeral() as instance:
        assert implicit.execute_in_process(instance=instance).dagster_run.job_name == implicit_asset_job_name()
    # The job the UI's "Materialize" and its backfills run the project's assets as. (`dagster.materialize` runs
    # another, `__ephemeral_asset_job__`: the project never calls it.)
    assert defs.resolve_implicit_global_asset_job_def().name == implicit_asset_job_name()


def test_a_run_carrying_the_backfill_tag_is_one_of_that_backfills_runs_and_the_daemon_tags_each_run_it_submits():
    import inspect

    from dagster import DagsterRun, RunsFilter
    from dagster._core.execution import asset_backfill

    assert BACKFILL_ID_TAG == "dagster/backfill"  # as the UI shows it on the runs of a backfill
    with DagsterInstance.ephemeral() as instance:
        ours = instance.add_run(
            DagsterRun(job_name=implicit_asset_job_name(), run_id=str(uuid.uuid4()), tags={BACKFILL_ID_TAG: "bf1"})
        )
        instance.add_run(DagsterRun(job_name=implicit_asset_job_name(), run_id=str(uuid.uuid4())))
        assert [r.run_id for r in instance.get_runs(RunsFilter.for_backfill("bf1"))] == [ours.run_id]
    # Where the backfill daemon sets it: on every run of an asset backfill (the UI's) it submits.
    submit = inspect.getsource(asset_backfill._submit_runs_and_update_backfill_in_chunks)
    assert "BACKFILL_ID_TAG: backfill_id" in submit


def test_a_step_whose_blocking_check_fails_raises_the_check_failed_error_and_a_non_blocking_one_does_not():
    from dagster import AssetCheckResult, AssetCheckSpec, Failure, MaterializeResult, materialize
    from dagster._core.errors import DagsterAssetCheckFailedError

    from exact_backfills.backfill import step_failures

    def table_checked(blocking: bool, then_fails: bool = False):
        @asset(name="table", check_specs=[AssetCheckSpec("positive", asset="table", blocking=blocking)])
        def table():
            yield AssetCheckResult(check_name="positive", passed=False)
            if then_fails:
                raise Failure("the body's own failure")
            yield MaterializeResult()

        return table

    with DagsterInstance.ephemeral() as instance:
        blocked = materialize([table_checked(blocking=True)], instance=instance, raise_on_error=False)
        warned = materialize([table_checked(blocking=False)], instance=instance, raise_on_error=False)
        failed = materialize([table_checked(True, then_fails=True)], instance=instance, raise_on_error=False)
    errors = [e.step_failure_data.error for e in blocked.all_events if e.is_step_failure]
    assert [e.cls_name for e in errors] == [DagsterAssetCheckFailedError.__name__]
    assert "1 blocking asset check failed" in errors[0].message
    # What the project makes of it, from public events alone: a checks-only run reports the check itself, not the
    # step's failure; a step whose body failed after its blocking check failed is still reported.
    assert step_failures(blocked, failed_checks=False) == [] and len(step_failures(blocked)) == 1
    assert [f.cause for f in step_failures(failed, failed_checks=False)] == ["the body's own failure"]
    assert warned.success


def test_each_beta_or_preview_api_the_project_silences_still_warns():
    import warnings

    from dagster import AssetCheckSpec, DataVersion, DataVersionsByPartition, observable_source_asset

    from exact_backfills import RELIED_ON

    uses = {
        "observable_source_asset": lambda: observable_source_asset(lambda: None),
        "DataVersionsByPartition": lambda: DataVersionsByPartition({"2025-01-01": DataVersion("v")}),
        "partitions_def on an AssetCheckSpec": lambda: AssetCheckSpec(
            "c", asset="a", partitions_def=DailyPartitionsDefinition(start_date="2025-01-01")
        ),
    }
    assert set(uses) == {name for names in RELIED_ON.values() for name in names}
    for category, names in RELIED_ON.items():
        for name in names:
            with warnings.catch_warnings(record=True) as caught:
                warnings.resetwarnings()
                warnings.simplefilter("always")
                uses[name]()
            assert any(issubclass(w.category, category) and name in str(w.message) for w in caught), name


def _instance(home, storage: str):
    """An instance in `home` with the project's configuration ("project") or Dagster's default storage ("dagster")."""
    from exact_backfills.instance import write_config

    if storage == "project":
        write_config(home)
    else:
        home.mkdir(parents=True, exist_ok=True)
        (home / "dagster.yaml").write_text("concurrency:\n  pools:\n    default_limit: 1\n")
    instance = DagsterInstance.from_config(str(home))
    instance.event_log_storage.initialize_concurrency_limit_to_default(LAKE_WRITES_POOL)
    return instance


# The digest of Dagster's claim as the project's replaces it: a Dagster release that changes it makes
# test_the_claim_the_project_replaces_is_still_dagsters_of_1_13 fail, so the replacement is read again against it.
DAGSTERS_CLAIM_SHA256 = "7628812bbe08bc3e"


def test_the_claim_the_project_replaces_is_still_dagsters_of_1_13():
    import hashlib
    import inspect

    from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage

    from exact_backfills.dagster_private import AtomicClaimPostgresEventLogStorage, AtomicClaimSqliteEventLogStorage

    source = inspect.getsource(SqlEventLogStorage._claim_concurrency_slot)
    assert hashlib.sha256(source.encode()).hexdigest()[:16] == DAGSTERS_CLAIM_SHA256, (
        "Dagster changed its slot claim: compare it with exact_backfills/dagster_private.py's, then update the digest"
    )
    assert "self._claim_concurrency_slot(" in inspect.getsource(SqlEventLogStorage.claim_concurrency_slot)
    for storage in (AtomicClaimSqliteEventLogStorage, AtomicClaimPostgresEventLogStorage):
        # Only the project's mixin and Dagster's SQL base define it: no storage class in between overrides it.
        assert [c.__name__ for c in storage.__mro__ if "_claim_concurrency_slot" in c.__dict__] == [
            "_AtomicSlotClaim",
            "SqlEventLogStorage",
        ]


def test_dagsters_own_claim_lets_two_processes_hold_the_one_slot_of_a_pool(tmp_path):
    """Why exact_backfills/dagster_private.py replaces Dagster's claim. When this fails, Dagster's claim is atomic: the
    AtomicClaim classes and their lines in dagster.yaml and dagster-postgres.yaml go."""
    storage = _instance(tmp_path / "a", "dagster").event_log_storage
    rival = DagsterInstance.from_config(str(tmp_path / "a")).event_log_storage
    ours, _, rival_run = claim_while_a_rival_takes_the_slot(storage, rival)
    assert ours, "Dagster's claim no longer lets two in"
    assert [s.run_id for s in storage.get_concurrency_info(LAKE_WRITES_POOL).claimed_slots] != [rival_run]


def test_of_two_processes_claiming_the_lake_writes_slot_at_once_one_holds_it_and_the_other_waits_for_it(tmp_path):
    from exact_backfills.dagster_private import AtomicClaimSqliteEventLogStorage

    instance = _instance(tmp_path / "home", "project")
    storage = instance.event_log_storage
    assert isinstance(storage, AtomicClaimSqliteEventLogStorage)
    rival = DagsterInstance.from_config(str(tmp_path / "home")).event_log_storage
    assert_one_holds_the_slot_and_the_other_gets_it_next(storage, rival)


def _claim_at_each_barrier(home: str, barrier, results, trials: int) -> None:
    """A process of its own claiming the pool's slot once per trial, at the instant the other process does."""
    storage = DagsterInstance.from_config(home).event_log_storage
    for _ in range(trials):
        run_id = str(uuid.uuid4())
        barrier.wait()
        results.put((run_id, storage.claim_concurrency_slot(LAKE_WRITES_POOL, run_id, PUBLISH_STEP).is_claimed))
        barrier.wait()  # the parent counts and frees the slot before the next trial


def test_two_processes_claiming_the_lake_writes_slot_at_the_same_instant_never_both_hold_it(tmp_path):
    import multiprocessing

    trials = 30
    instance = _instance(tmp_path / "home", "project")
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(3), context.Queue()
    workers = [
        context.Process(
            target=_claim_at_each_barrier, args=(str(tmp_path / "home"), barrier, results, trials), daemon=True
        )
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    holders = []
    try:
        for _ in range(trials):
            barrier.wait(timeout=60)
            claims = [results.get(timeout=60) for _ in workers]
            holders.append(sum(claimed for _, claimed in claims))
            for run_id, _ in claims:
                instance.event_log_storage.free_concurrency_slots_for_run(run_id)
            barrier.wait(timeout=60)
    finally:
        barrier.abort()  # a worker still waiting fails instead of waiting for good
        for worker in workers:
            worker.join(timeout=60)
            if worker.is_alive():
                worker.terminate()
    assert holders == [1] * trials


# The digests of Dagster's SQLite connection and table check as the project's storage replaces them: a Dagster
# release that changes either makes the test below fail, so the replacement is read again against it.
DAGSTERS_SQLITE_CONNECT_SHA256 = {"_connect": "b8435f2665689760", "has_table": "577d801c70b2a4a5"}


def test_the_sqlite_connection_the_project_replaces_is_still_dagsters_of_1_13():
    import hashlib
    import inspect

    from dagster._core.storage.event_log import SqliteEventLogStorage

    from exact_backfills.dagster_private import AtomicClaimSqliteEventLogStorage

    for name, digest in DAGSTERS_SQLITE_CONNECT_SHA256.items():
        source = inspect.getsource(getattr(SqliteEventLogStorage, name))
        assert hashlib.sha256(source.encode()).hexdigest()[:16] == digest, (
            f"Dagster changed SqliteEventLogStorage.{name}: compare it with exact_backfills/dagster_private.py's, then "
            "update the digest"
        )
        owners = [c.__name__ for c in AtomicClaimSqliteEventLogStorage.__mro__ if name in c.__dict__]
        assert owners[0] == "_EnginePerFile" and "SqliteEventLogStorage" in owners, owners
    # Every connection of Dagster's storage comes from these two: its run and index connections, its table checks.
    for method in ("run_connection", "index_connection"):
        assert "self._connect(" in inspect.getsource(getattr(SqliteEventLogStorage, method)), method


# The digests of Dagster's methods that store a check result, as the project's storages replace them (one serialization,
# statements built once, the event and its execution row written together; PostgreSQL's connection held open): a
# Dagster release that changes one makes the test below fail, so the replacement is read again against it.
DAGSTERS_CHECK_RESULT_WRITES_SHA256 = {
    ("SqlEventLogStorage", "_update_asset_check_evaluation"): "961fd6041447b07a",
    ("SqlEventLogStorage", "_store_asset_check_evaluation_planned"): "bbecef7ab5ce9d01",
    ("SqlEventLogStorage", "store_asset_check_event"): "6d148295fa69bb45",
    ("SqlEventLogStorage", "_event_to_row"): "93d47fbe7edc4f70",
    ("SqliteEventLogStorage", "store_event"): "f89aed40602438b9",
    ("PostgresEventLogStorage", "store_event"): "4a2e37e5871bf2c8",
    ("PostgresEventLogStorage", "__init__"): "647dff00b58c1222",
}


def test_the_check_result_writes_the_project_replaces_are_still_dagsters_of_1_13():
    import hashlib

    from dagster._core.storage.event_log import SqliteEventLogStorage
    from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage
    from dagster_postgres import PostgresEventLogStorage

    classes = {c.__name__: c for c in (SqlEventLogStorage, SqliteEventLogStorage, PostgresEventLogStorage)}
    for (owner, name), digest in DAGSTERS_CHECK_RESULT_WRITES_SHA256.items():
        source = inspect.getsource(getattr(classes[owner], name))
        assert hashlib.sha256(source.encode()).hexdigest()[:16] == digest, (
            f"Dagster changed {owner}.{name}: compare it with exact_backfills/dagster_private.py's, then update the "
            "digest"
        )


# The digests of the Dagster methods the project's storages call (or whose attributes they use) without replacing them,
# and of the function the tests read a check's Partitions view with: a release that changes one makes the test below
# fail, so each caller is read again against it.
DAGSTERS_CALLED_SHA256 = {
    ("SqlEventLogStorage", "_store_asset_event_tags"): "85d6f17ef04b926f",
    ("SqlEventLogStorage", "_store_asset_event"): "fdb9340b9eef1c9b",
    ("SqlEventLogStorage", "_event_insert_timestamp"): "02e6947ee3f9408a",
    ("SqlEventLogStorage", "index_transaction"): "00b2488c8cdfd277",
    ("SqliteEventLogStorage", "__init__"): "264c15baa761a7bb",
    ("SqliteEventLogStorage", "_initdb"): "7a302d98eb61a34d",
    ("SqliteEventLogStorage", "path_for_shard"): "0eaeb69bc81ba0a7",
    ("SqliteEventLogStorage", "conn_string_for_shard"): "896bc510d776042e",
    ("EventLogStorage", "store_event_batch"): "d710189545dbace2",
    ("PostgresEventLogStorage", "_connect"): "a1935b91a983062d",
    ("asset_check_state", "bulk_update_asset_check_state"): "28d84a4d496c72d3",
}


def test_the_dagster_methods_the_projects_storages_call_are_still_dagsters_of_1_13():
    import hashlib

    from dagster._core.storage import asset_check_state
    from dagster._core.storage.event_log import SqliteEventLogStorage
    from dagster._core.storage.event_log.base import EventLogStorage
    from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage
    from dagster_postgres import PostgresEventLogStorage

    classes = (SqlEventLogStorage, SqliteEventLogStorage, EventLogStorage, PostgresEventLogStorage)
    owners = {"asset_check_state": asset_check_state, **{c.__name__: c for c in classes}}
    for (owner, name), digest in DAGSTERS_CALLED_SHA256.items():
        source = inspect.getsource(getattr(owners[owner], name))
        assert hashlib.sha256(source.encode()).hexdigest()[:16] == digest, (
            f"Dagster changed {owner}.{name}: compare it with its use in exact_backfills/dagster_private.py, then "
            "update the digest"
        )


def test_the_projects_sqlite_storage_records_every_event_and_check_result_as_dagsters_own_does(tmp_path, monkeypatch):
    from exact_backfills.dagster_private import AtomicClaimSqliteEventLogStorage

    ours = _instance(tmp_path / "project", "project")
    assert isinstance(ours.event_log_storage, AtomicClaimSqliteEventLogStorage)
    assert_records_as_dagsters_own(ours, _instance(tmp_path / "dagster", "dagster"), monkeypatch)


def test_the_projects_storage_records_planned_check_days_and_their_results_as_dagsters_does(tmp_path):
    """A range run's planned check rows (one per check per day, written when the run is created), then the results
    that replace them, as Dagster's own storage writes them: including a result naming the materialization it
    checked, and one on a day that was not planned."""
    from dagster import AssetCheckEvaluation, AssetKey, DagsterEvent, DagsterEventType, EventLogEntry
    from dagster._core.events import EngineEventData

    from bench.event_log import definitions
    from exact_backfills.dagster_private import create_execution_plan

    defs, days = definitions(4, 2)
    job = defs.resolve_job_def("all")
    tags = {ASSET_PARTITION_RANGE_START_TAG: days[0], ASSET_PARTITION_RANGE_END_TAG: days[-1]}
    found = []
    for storage in ("project", "dagster"):
        instance = _instance(tmp_path / storage, storage)
        run = instance.create_run_for_job(job_def=job, execution_plan=create_execution_plan(job, tags=tags), tags=tags)
        planned_rows = check_execution_rows(instance, run.run_id)
        for day, materialization_id in ((days[1], 7), ("2030-01-01", None)):
            evaluation = AssetCheckEvaluation(
                asset_key=AssetKey("table_0"),
                check_name="check_1",
                passed=materialization_id is None,
                partition=day,
                target_materialization_data=AssetCheckEvaluationTargetMaterializationData(
                    storage_id=materialization_id, run_id=run.run_id, timestamp=1.0
                )
                if materialization_id
                else None,
            )
            event = DagsterEvent(DagsterEventType.ASSET_CHECK_EVALUATION.value, "all", event_specific_data=evaluation)
            instance.store_event(
                EventLogEntry(None, 10, "", run.run_id, 1.0, dagster_event=event, job_name="all", step_key="table_0")
            )
        # The step's next event (the project's storage writes the results it holds before it).
        next_event = DagsterEvent(DagsterEventType.ENGINE_EVENT.value, "all", event_specific_data=EngineEventData())
        instance.store_event(EventLogEntry(None, 10, "", run.run_id, 2.0, dagster_event=next_event, job_name="all"))
        found.append((planned_rows, check_execution_rows(instance, run.run_id)))
    (planned_ours, stored_ours), (planned_dagsters, stored_dagsters) = found
    assert planned_ours == planned_dagsters and len(planned_ours) == 6 * 2 * 4
    assert stored_ours == stored_dagsters and len(stored_ours) == 6 * 2 * 4 + 1
    by_day = {(r[0], r[1], r[2]): (r[3], r[10]) for r in stored_ours}
    assert by_day[('["table_0"]', "check_1", days[1])] == ("FAILED", 7)
    assert by_day[('["table_0"]', "check_1", "2030-01-01")] == ("SUCCEEDED", None)


def test_a_day_checked_by_a_run_planned_before_another_checked_it_shows_the_newer_result_where_dagsters_shows_none(
    tmp_path,
):
    """A run planned (the daily run, queued behind the lake's slot) before another run publishes and checks its day
    (a restatement), then publishing and checking the day itself: its result, which checked the day's latest
    materialization, is the day's current one in the project's storage; Dagster's keeps the row its planned event made
    first, takes the other's newer row as the day's, finds it older than the latest materialization and shows the day's
    check Missing. When Dagster shows it current too, execution_rows can update the planned row again."""
    from dagster import (
        AssetCheckEvaluation,
        AssetCheckKey,
        AssetKey,
        AssetMaterialization,
        DagsterEvent,
        DagsterEventType,
        EventLogEntry,
    )

    from bench.event_log import definitions
    from exact_backfills.dagster_private import create_execution_plan

    defs, days = definitions(4, 2)
    job, day, table, check = defs.resolve_job_def("all"), days[1], AssetKey("table_0"), "check_1"
    tags = {ASSET_PARTITION_RANGE_START_TAG: days[0], ASSET_PARTITION_RANGE_END_TAG: days[-1]}

    def publish_and_check(instance, run_id: str) -> None:
        instance.report_runless_asset_event(AssetMaterialization(table, partition=day))
        latest = instance.fetch_materializations(table, limit=1).records[0]
        evaluation = AssetCheckEvaluation(
            asset_key=table,
            check_name=check,
            passed=True,
            partition=day,
            target_materialization_data=AssetCheckEvaluationTargetMaterializationData(
                storage_id=latest.storage_id, run_id=latest.run_id, timestamp=latest.timestamp
            ),
        )
        event = DagsterEvent(DagsterEventType.ASSET_CHECK_EVALUATION.value, "all", event_specific_data=evaluation)
        instance.store_event(EventLogEntry(None, 10, "", run_id, 1.0, dagster_event=event, job_name="all"))
        instance.event_log_storage.dispose()  # the project's storage writes the results it holds

    current = {}
    for storage in ("project", "dagster"):
        instance = _instance(tmp_path / storage, storage)
        planned = instance.create_run_for_job(
            job_def=job, execution_plan=create_execution_plan(job, tags=tags), tags=tags
        )
        publish_and_check(instance, "a-restatement")
        publish_and_check(instance, planned.run_id)
        (info,) = instance.event_log_storage.get_asset_check_partition_info([AssetCheckKey(table, check)], None, [day])
        current[storage] = (info.latest_planned_run_id == planned.run_id, info.is_current)
    assert current == {"project": (True, True), "dagster": (False, False)}


def test_the_projects_storage_plans_a_range_run_as_dagster_does_with_the_planned_events_setting():
    from dagster._core.storage.event_log.base import EventLogStorage

    from exact_backfills.dagster_private import AtomicClaimPostgresEventLogStorage, AtomicClaimSqliteEventLogStorage

    # Dagster still reads the setting through this property of the storage (the variable alone, when this fails).
    name = "supports_partition_subset_in_asset_materialization_planned_events"
    assert "DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS" in inspect.getsource(getattr(EventLogStorage, name).fget)
    for storage in (AtomicClaimSqliteEventLogStorage, AtomicClaimPostgresEventLogStorage):
        assert getattr(storage, name).fget(None) is True


def test_a_runs_events_reach_a_webserver_watching_the_run_as_they_are_written(tmp_path):
    """The webserver shows a run's events as they come by watching its file: each event the run's process writes
    through the project's storage reaches a watcher in another instance of it, one by one."""
    import time

    from dagster import DagsterEvent, EventLogEntry
    from dagster._core.events import DagsterEventType, EngineEventData

    run_process, webserver = _instance(tmp_path, "project"), _instance(tmp_path, "project")
    run_id = str(uuid.uuid4())

    def event(message: str) -> EventLogEntry:
        engine_event = DagsterEvent(
            DagsterEventType.ENGINE_EVENT.value, "job", message=message, event_specific_data=EngineEventData()
        )
        return EventLogEntry(None, 20, message, run_id, time.time(), dagster_event=engine_event, job_name="job")

    run_process.event_log_storage.store_event(event("started"))
    seen: list[str] = []
    webserver.event_log_storage.watch(run_id, None, lambda entry, _: seen.append(entry.user_message))
    try:
        for message in ("first", "second", "third"):
            run_process.event_log_storage.store_event(event(message))
            deadline = time.monotonic() + 10
            while message not in seen and time.monotonic() < deadline:
                time.sleep(0.05)
            assert seen[-1:] == [message], f"the watcher saw {seen} once {message!r} was written"
    finally:
        webserver.dispose()
        run_process.dispose()


# The digests of the Dagster methods add_asset_metadata_by_partition stands for: a Dagster release that changes one
# makes the test below fail, so the function is read again against it.
DAGSTERS_ASSET_METADATA_SHA256 = {
    ("StepExecutionContext", "add_asset_metadata"): "6dff312134cdce21",
    ("StepExecutionContext", "get_asset_metadata"): "1ab86e143146d629",
    ("OutputMetadataAccumulator", "_with_metadata"): "af001d6acf996c48",
    ("OutputMetadataAccumulator", "with_additional_asset_metadata"): "8e5b3e1d29b42e1e",
}


def test_the_asset_metadata_methods_the_project_adds_to_at_once_are_still_dagsters_of_1_13():
    import hashlib

    from dagster._core.execution.context.metadata_logging import OutputMetadataAccumulator
    from dagster._core.execution.context.system import StepExecutionContext

    classes = {c.__name__: c for c in (StepExecutionContext, OutputMetadataAccumulator)}
    for (owner, name), digest in DAGSTERS_ASSET_METADATA_SHA256.items():
        source = inspect.getsource(getattr(classes[owner], name))
        assert hashlib.sha256(source.encode()).hexdigest()[:16] == digest, (
            f"Dagster changed {owner}.{name}: compare it with exact_backfills/dagster_private.py's "
            "add_asset_metadata_by_partition, then update the digest"
        )


def _materializations_with_days_metadata(at_once: bool, days: tuple[str, str], outside: str | None = None):
    """A range run of two assets, each day's metadata added day by day or at once: every materialization's asset,
    day and metadata."""
    from dagster import AssetKey, AssetSpec, MaterializeResult, multi_asset

    from exact_backfills.dagster_private import add_asset_metadata_by_partition

    partitions = DailyPartitionsDefinition(start_date="2025-01-01", end_date="2025-01-10")

    @multi_asset(
        specs=[AssetSpec("a"), AssetSpec("b")],
        partitions_def=partitions,
        backfill_policy=BackfillPolicy.single_run(),
        can_subset=True,
    )
    def both(context: AssetExecutionContext):
        for key in ("a", "b"):
            by_day = {day: {"rows": i, "day": day, "asset": key} for i, day in enumerate(context.partition_keys)}
            if outside:
                by_day[outside] = {"rows": -1}
            if at_once:
                add_asset_metadata_by_partition(context, AssetKey(key), by_day)
            else:
                for day, metadata in by_day.items():
                    context.add_asset_metadata(metadata, asset_key=key, partition_key=day)
            yield MaterializeResult(asset_key=key, metadata={"run_figure": 1})

    job = Definitions(assets=[both], jobs=[define_asset_job("j")]).resolve_job_def("j")
    tags = {ASSET_PARTITION_RANGE_START_TAG: days[0], ASSET_PARTITION_RANGE_END_TAG: days[1]}
    with DagsterInstance.ephemeral() as instance:
        result = job.execute_in_process(instance=instance, tags=tags, raise_on_error=False)
    if not result.success:
        return [e.step_failure_data.error.message for e in result.all_events if e.is_step_failure]
    return sorted(
        (
            m.asset_key.to_user_string(),
            m.partition,
            sorted((k, v.value) for k, v in m.metadata.items()),
        )
        for m in (
            e.event_specific_data.materialization
            for e in result.all_events
            if e.event_type_value == "ASSET_MATERIALIZATION"
        )
    )


def test_adding_a_tables_days_metadata_at_once_gives_each_days_materialization_what_adding_it_day_by_day_gives():
    day_by_day = _materializations_with_days_metadata(at_once=False, days=("2025-01-02", "2025-01-05"))
    at_once = _materializations_with_days_metadata(at_once=True, days=("2025-01-02", "2025-01-05"))
    assert at_once == day_by_day and len(at_once) == 2 * 4
    assert ("a", "2025-01-03", [("asset", "a"), ("day", "2025-01-03"), ("rows", 1), ("run_figure", 1)]) in at_once
    # A day the run does not target is refused, as Dagster refuses it.
    refused = _materializations_with_days_metadata(True, ("2025-01-02", "2025-01-05"), outside="2025-01-08")
    dagsters = _materializations_with_days_metadata(False, ("2025-01-02", "2025-01-05"), outside="2025-01-08")
    assert refused == dagsters and "'2025-01-08' that is not being targeted" in refused[0]


# exact_backfills/ui_server.py builds the webserver's application as `dagster-webserver` does, from two internal
# classes: a release that renames them or their arguments makes this fail in the quick loop.
def test_the_workspace_classes_the_ui_server_builds_the_webserver_from_are_still_dagsters_of_1_13():
    import inspect

    from exact_backfills.dagster_private import WorkspaceFileTarget, WorkspaceProcessContext

    context = inspect.signature(WorkspaceProcessContext).parameters
    assert {"instance", "version", "read_only", "workspace_load_target"} <= set(context)
    assert list(WorkspaceFileTarget(paths=["workspace.yaml"]).paths) == ["workspace.yaml"]


def test_no_module_but_dagster_private_imports_from_dagsters_private_modules():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    allowed = root / "exact_backfills" / "dagster_private.py"
    found = []
    for folder in ("exact_backfills", "assets_pkg", "tests/support", "bench"):
        for path in sorted((root / folder).rglob("*.py")):
            if path == allowed:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
                found += [f"{path.relative_to(root)}:{node.lineno} {n}" for n in names if n.startswith("dagster._")]
    assert not found, f"private Dagster imports outside exact_backfills/dagster_private.py: {found}"


def _private_names() -> list[str]:
    """The names exact_backfills/dagster_private.py imports from Dagster's private modules."""
    import ast
    from pathlib import Path

    import exact_backfills.dagster_private as module

    tree = ast.parse(Path(module.__file__).read_text())
    return [
        a.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dagster._")
        for a in node.names
    ]


def test_the_private_modules_header_and_the_architecture_doc_list_each_private_name_and_count_them():
    import re
    from pathlib import Path

    import exact_backfills.dagster_private as module

    names = _private_names()
    header = module.__doc__ or ""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    section = doc[doc.index("**Private Dagster names, in one place.**") :].split("\n\n")[0]
    assert re.search(rf"Names imported \({len(names)}\)", header), "the header's count of private names is wrong"
    assert f"{len(names)} names" in section, "docs/architecture.md's count of private names is wrong"
    assert [n for n in names if n not in header] == [] and [n for n in names if f"`{n}`" not in section] == []
    # Each guard the header names is in this file: a test's name, or a digest table.
    guards = [g.strip() for found in re.findall(r"\[([^\]]+)\]", header) for g in found.split(",")]
    source = Path(__file__).read_text()
    assert guards and [g for g in guards if not re.search(rf"(def test_\w*|\b){re.escape(g)}", source)] == []


# Dagster's two time functions the simulated clock replaces, and the two that read them: when one changes, check that
# Dagster still reads "now" through them alone (exact_backfills/dagster_private.py, item 7).
DAGSTERS_CLOCK_SHA256 = {
    "dagster._time._mockable_get_current_datetime": "32848c51b9f6f779",
    "dagster._time._mockable_get_current_timestamp": "405cb9666c6efba5",
    "dagster._time.get_current_datetime": "794952bbc9dcfd4d",
    "dagster._time.get_current_timestamp": "308920a35f6b5ba1",
    # the scheduler's next look, and its loop sleeping until then
    "dagster._scheduler.scheduler._get_next_scheduler_iteration_time": "01d016e111dc68da",
    "dagster._scheduler.scheduler.execute_scheduler_iteration_loop": "1a88ae61e07e94a8",
    # the daemon controller's loop, timed from a wall-clock start against its module's get_current_timestamp
    "dagster._daemon.controller:DagsterDaemonController.check_workspace_freshness": "a428da785199c294",
    "dagster._daemon.controller:DagsterDaemonController.check_daemon_loop": "24835278cb624aa2",
    # its threads' heartbeat health, read against a now it is given
    "dagster._daemon.controller:DagsterDaemonController._daemon_heartbeat_health": "b9e4c02d7596517c",
    "dagster._daemon.controller.get_daemon_statuses": "abea8b14cc689aac",
}


def test_the_time_functions_the_simulated_clock_replaces_are_still_dagsters_of_1_13():
    import hashlib
    import importlib

    import dagster._daemon  # noqa: F401  (before the scheduler's module, which it imports in turn)

    for name, digest in DAGSTERS_CLOCK_SHA256.items():
        module, path = name.split(":") if ":" in name else name.rsplit(".", 1)
        found = importlib.import_module(module)
        for attribute in path.split("."):
            found = getattr(found, attribute)
        source = inspect.getsource(found)
        assert hashlib.sha256(source.encode()).hexdigest()[:16] == digest, (
            f"Dagster changed {name}: check that the simulated clock still replaces its 'now' and the scheduler's "
            "next look, then update the digest"
        )


def test_a_process_loading_the_project_follows_the_simulated_clock_and_partitions_grow_with_it(tmp_path, monkeypatch):
    import subprocess
    import sys
    import textwrap

    from exact_backfills import clock

    monkeypatch.setenv(clock.SIMULATED_CLOCK, str(tmp_path / "clock"))
    clock.set_simulated(datetime(2025, 3, 8, 12, tzinfo=UTC))
    # A process of its own, as a code server or a run is: the project's import makes Dagster read the clock's file.
    probe = textwrap.dedent("""
        from datetime import UTC, datetime
        import exact_backfills
        from exact_backfills import clock
        from dagster import DailyPartitionsDefinition
        from dagster._time import get_current_datetime, get_current_timestamp
        from dagster import DagsterInstance, job, op
        days = DailyPartitionsDefinition(start_date="2025-01-01", timezone="America/New_York", end_offset=1)
        print(days.get_last_partition_key(), get_current_datetime().date(), round(get_current_timestamp()))
        @op
        def step():
            pass
        @job
        def one_step():
            step()
        with DagsterInstance.ephemeral() as instance:  # a run's events are stamped by the clock too
            run = one_step.execute_in_process(instance=instance).dagster_run
            record = instance.get_run_record_by_id(run.run_id)
            print(round(record.start_time), round(record.end_time), round(record.create_timestamp.timestamp()))
        clock.set_simulated(datetime(2025, 3, 10, 3, 30, tzinfo=UTC))  # 23:30 on the 9th in New York, after DST
        print(days.get_last_partition_key(), get_current_datetime().date(), round(get_current_timestamp()))
    """)
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    before, run, after = (line.split() for line in shown.stdout.splitlines())
    assert before[:2] == ["2025-03-08", "2025-03-08"]
    simulated = datetime(2025, 3, 8, 12, tzinfo=UTC).timestamp()
    assert all(abs(int(t) - simulated) < 60 for t in (before[2], *run)), (before, run)
    assert after[:2] == ["2025-03-09", "2025-03-10"]  # New York's day; the UTC date Dagster reads
    assert clock.today("America/New_York") == date(2025, 3, 9)  # this process reads the same clock
    with pytest.raises(clock.ClockError, match="does not go back"):
        clock.set_simulated(datetime(2025, 3, 1, tzinfo=UTC))
