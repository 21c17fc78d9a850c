"""What an event log storage records of a range run, by value: the project's storages are compared with Dagster's
own with these (tests/test_dagster_private.py for SQLite, tests/test_cluster_profile.py for PostgreSQL)."""

from dagster import DagsterInstance, deserialize_value

from exact_backfills.dagster_private import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from exact_backfills.dagster_private import AssetCheckExecutionsTable as Executions
from exact_backfills.dagster_private import AssetEventTagsTable as Tags
from exact_backfills.dagster_private import AssetKeyTable as Assets
from exact_backfills.dagster_private import SqlEventLogStorageTable as Events
from exact_backfills.event_log_writes import EVENT_BATCH_SIZE, EVENT_BATCH_SIZE_VARIABLE


def range_run(instance: DagsterInstance) -> str:
    """A range run of 5 days of a chain of assets, each with 2 check results per day (bench/event_log.py's): its id."""
    from bench.event_log import definitions

    defs, days = definitions(5, 2)
    tags = {ASSET_PARTITION_RANGE_START_TAG: days[0], ASSET_PARTITION_RANGE_END_TAG: days[-1]}
    result = defs.resolve_job_def("all").execute_in_process(instance=instance, tags=tags)
    assert result.success
    return result.run_id


def what_dagster_shows(instance: DagsterInstance, run_id: str) -> tuple[list[str], dict[str, list[str]]]:
    """The run's events by type, in order, and each check's latest result per day."""
    from dagster import AssetCheckKey, AssetKey

    types = [r.event_log_entry.dagster_event_type for r in instance.get_records_for_run(run_id, limit=10_000).records]
    results = {}
    for table in range(6):
        for check in range(2):
            key = AssetCheckKey(AssetKey(f"table_{table}"), f"check_{check}")
            executions = instance.event_log_storage.get_asset_check_execution_history(key, limit=100)
            results[key.to_user_string()] = sorted(f"{e.partition}:{e.status.value}" for e in executions)
    return [t.value if t else "" for t in types], results


def check_execution_rows(instance: DagsterInstance, run_id: str) -> list[tuple]:
    """Every check execution row of the run as stored, by value: its check, day and status, the event it holds (its
    type, check, day and result), that event's row in the event log, and the materialization it names."""
    import sqlalchemy

    storage = instance.event_log_storage
    with storage.index_connection() as conn:
        rows = conn.execute(sqlalchemy.select(Executions).where(Executions.c.run_id == run_id)).mappings().all()
        event_types = dict(conn.execute(sqlalchemy.select(Events.c.id, Events.c.dagster_event_type)).all())
    found = []
    for row in rows:
        entry = deserialize_value(row["evaluation_event"])
        data = entry.dagster_event.event_specific_data
        found.append(
            (
                row["asset_key"],
                row["check_name"],
                row["partition"],
                row["execution_status"],
                entry.dagster_event_type.value,
                getattr(data, "check_name", None),
                getattr(data, "partition", None),
                getattr(data, "passed", None),
                event_types.get(row["evaluation_event_storage_id"]),
                row["evaluation_event_timestamp"] is not None,
                row["materialization_event_storage_id"],
            )
        )
    return sorted(found, key=str)


def asset_rows(instance: DagsterInstance) -> tuple[list[tuple], list[tuple]]:
    """Each asset's entry (its last materialization: run and partition) and every indexed tag of its events, by
    value."""
    import sqlalchemy

    with instance.event_log_storage.index_connection() as conn:
        assets = conn.execute(sqlalchemy.select(Assets.c.asset_key, Assets.c.last_materialization)).all()
        tags = conn.execute(sqlalchemy.select(Tags.c.asset_key, Tags.c.key, Tags.c.value)).all()
    entries = []
    for key, last in assets:
        record = deserialize_value(last) if last else None
        entry = record.event_log_entry if record else None
        entries.append((key, entry.dagster_event.partition if entry else None, bool(record and record.storage_id)))
    return sorted(entries, key=str), sorted((t[0], t[1]) for t in tags)


def assert_records_as_dagsters_own(ours: DagsterInstance, dagsters: DagsterInstance, monkeypatch) -> None:
    """The same range run recorded by the project's storage (materializations batched as its code location sets it)
    and by Dagster's own (each event as it comes): the same events in the same order, the same check results and
    execution rows, the same asset entries and tags."""
    monkeypatch.setenv(EVENT_BATCH_SIZE_VARIABLE, EVENT_BATCH_SIZE)
    run_ours = range_run(ours)
    monkeypatch.delenv(EVENT_BATCH_SIZE_VARIABLE)
    run_dagsters = range_run(dagsters)
    (events_ours, results_ours), (events_dagsters, results_dagsters) = (
        what_dagster_shows(ours, run_ours),
        what_dagster_shows(dagsters, run_dagsters),
    )

    planned = "ASSET_MATERIALIZATION_PLANNED"
    assert [e for e in events_ours if e != planned] == [e for e in events_dagsters if e != planned]
    assert results_ours == results_dagsters
    assert events_ours.count("ASSET_CHECK_EVALUATION") == 6 * 2 * 5
    assert all(len(results) == 5 for results in results_ours.values())
    # A range run plans each asset once, naming its days, where Dagster's default plans each asset's every day.
    assert (events_ours.count(planned), events_dagsters.count(planned)) == (6, 6 * 5)
    # The check execution rows hold the same values, each pointing at its result's row in the event log.
    rows = check_execution_rows(ours, run_ours)
    assert rows == check_execution_rows(dagsters, run_dagsters)
    assert len(rows) == 6 * 2 * 5 and {r[8] for r in rows} == {"ASSET_CHECK_EVALUATION"}
    # Each asset's entry names its last materialized day, and the materializations' tags are indexed alike.
    assert asset_rows(ours) == asset_rows(dagsters)
    assert asset_rows(ours)[0] and asset_rows(ours)[1]
