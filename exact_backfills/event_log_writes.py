"""How the project's event log storages (dagster_private.py) write, in what Dagster makes public: the settings they
write with, which events they hold, and the values of a check's execution rows. Nothing here touches Dagster's
private API."""

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy
from dagster import AssetCheckEvaluation, DagsterEventType, EventLogEntry, serialize_value

# The database files kept open at once by a process: the index and the runs it writes or reads most recently.
OPEN_DATABASE_FILES = 16

# A run's check results buffered at most before they are written together.
CHECK_RESULTS_PER_WRITE = 1000

# The production profile's runs store their events through PgBouncer (scripts/postgres.sh). Dagster's storage holds no
# connection, by design, so that instances do not accumulate them: each statement takes a connection and gives it
# back, which costs a round trip of its own. Its webserver already holds one open (`optimize_for_webserver`); a run
# process, which writes an event per check per day, holds one too, recycled after this long.
POOL_RECYCLE_S = 3600

# Dagster writes the materializations it derives from a partitioned output (one per day of a range run) in batches
# only when DAGSTER_EVENT_BATCH_SIZE is set in the process that executes the run: `DagsterInstance.handle_new_event`
# reads it at every event, and hands a batch to the storage's `store_event_batch`, which the project's storages write
# at once. Set by the code location in every process that loads it (unless the environment sets it): the command
# line's, and each run's that Dagster launches.
EVENT_BATCH_SIZE = "1000"
EVENT_BATCH_SIZE_VARIABLE = "DAGSTER_EVENT_BATCH_SIZE"


def batch_materializations() -> None:
    os.environ.setdefault(EVENT_BATCH_SIZE_VARIABLE, EVENT_BATCH_SIZE)


def sync_at_checkpoints(dbapi_connection: Any, _: Any) -> None:
    """A SQLite connection's commits, without a sync each: in WAL mode (Dagster's), NORMAL syncs at checkpoints rather
    than at every commit. A crash of the process loses nothing, a crash of the machine may lose the last events
    written, never the files' consistency; the lake, not the event log, is the record of what is published."""
    dbapi_connection.execute("PRAGMA synchronous=NORMAL")


def run_check_result(event: EventLogEntry) -> AssetCheckEvaluation | None:
    """The check result an event of a run carries on one partition (what a range run records day by day), else None."""
    dagster_event = event.dagster_event
    if dagster_event is None or not event.run_id:
        return None
    if dagster_event.event_type_value != DagsterEventType.ASSET_CHECK_EVALUATION.value:
        return None
    evaluation = dagster_event.event_specific_data
    return evaluation if isinstance(evaluation, AssetCheckEvaluation) and evaluation.partition else None


# What identifies a check's execution row: asset, check, run and partition.
ExecutionKey = tuple[str, str, str, str]


@dataclass(frozen=True)
class BufferedCheckResult:
    """A run's check result waiting to be written, with its event log row (serialized once)."""

    event: EventLogEntry
    evaluation: AssetCheckEvaluation
    row: dict[str, Any]

    @property
    def key(self) -> ExecutionKey:
        """Its execution row's."""
        e = self.evaluation
        return (e.asset_key.to_string(), e.check_name, self.event.run_id, e.partition or "")


@dataclass
class ExecutionRows:
    """A batch of check results' execution rows, each new; the rows their planned events created, to delete first."""

    replaced: list[dict[str, Any]] = field(default_factory=list)
    inserts: list[dict[str, Any]] = field(default_factory=list)


def latest_results(
    written: list[tuple[BufferedCheckResult, int]],
) -> dict[ExecutionKey, tuple[BufferedCheckResult, int]]:
    """Each execution row's result with its event id: of two results for one row, the later is the row's."""
    return {result.key: (result, event_id) for result, event_id in written}


def execution_rows(
    latest: dict[ExecutionKey, tuple[BufferedCheckResult, int]],
    planned: set[tuple[str, ...]],
    status_of: Mapping[bool, str],
) -> ExecutionRows:
    """The execution row of each result, with the values Dagster's `_update_asset_check_evaluation` writes
    (`status_of`: the row's status for a result that passed, and one that failed). Where Dagster updates the row its
    planned event created, this replaces it with a new one: Dagster takes a day's newest row (the highest id) as its
    current result, so a run planned before another run published and checked the day, and done after it, left its
    result, though the newer, behind the other's, and the UI showed the day's check Missing."""
    rows = ExecutionRows()
    for key, (result, event_id) in latest.items():
        target = result.evaluation.target_materialization_data
        if key in planned:
            rows.replaced.append(dict(zip(("of_asset", "of_check", "of_run", "of_partition"), key, strict=True)))
        rows.inserts.append(
            {
                **dict(zip(("asset_key", "check_name", "run_id", "partition"), key, strict=True)),
                "execution_status": status_of[bool(result.evaluation.passed)],
                "evaluation_event": result.row["event"],
                "evaluation_event_timestamp": result.row["timestamp"],
                "evaluation_event_storage_id": event_id,
                "materialization_event_storage_id": target.storage_id if target else None,
            }
        )
    return rows


def planned_execution_deletion(executions: sqlalchemy.Table) -> sqlalchemy.Delete:
    """The deletion of the execution row a result's planned event created in `executions` (Dagster's table), named
    by its asset, check, run and partition."""
    return executions.delete().where(
        executions.c.asset_key == sqlalchemy.bindparam("of_asset"),
        executions.c.check_name == sqlalchemy.bindparam("of_check"),
        executions.c.run_id == sqlalchemy.bindparam("of_run"),
        executions.c.partition == sqlalchemy.bindparam("of_partition"),
    )


def planned_among(executions: sqlalchemy.Table, latest: Mapping[ExecutionKey, object]) -> sqlalchemy.Select:
    """The keys of the execution rows in `executions` (Dagster's table) that may be those of `latest`, as their planned
    events created them (a superset: the caller keeps the keys it has)."""
    c = executions.c
    return (
        sqlalchemy.select(c.asset_key, c.check_name, c.run_id, c.partition)
        .where(c.run_id.in_({k[2] for k in latest}))
        .where(c.asset_key.in_({k[0] for k in latest}))
        .where(c.check_name.in_({k[1] for k in latest}))
        .where(c.partition.in_({k[3] for k in latest}))
    )


def planned_rows(
    event: EventLogEntry, planned: Any, partitions: Sequence[str], timestamp: Any, event_id: int | None, status: str
) -> list[dict[str, Any]]:
    """The planned execution row of each of `partitions` of a planned check event, as Dagster writes one per event."""
    serialized = serialize_value(event)
    return [
        {
            "asset_key": planned.asset_key.to_string(),
            "check_name": planned.check_name,
            "partition": partition,
            "run_id": event.run_id,
            "execution_status": status,
            "evaluation_event": serialized,
            "evaluation_event_timestamp": timestamp,
            "evaluation_event_storage_id": event_id,
        }
        for partition in partitions
    ]
