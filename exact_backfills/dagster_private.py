"""Every name the project takes from Dagster's private modules, in one place, each with why no public API serves.
tests/test_dagster_private.py fails loudly when Dagster moves or changes any of them: that is the signal to look
for the public API that replaces it.

Most are the string constants Dagster itself reads from run tags and observations; one is a class. The rest change
what Dagster does, each for a cost measured in bench/ or a fault shown by a test, each beside its reason below:
- in the event log storage classes: a pool slot claim that is atomic; for SQLite, one engine and open connection per
  database file; for PostgreSQL, one connection held open; a range run's planned materializations as one event per
  asset; a run's check results held until its next event and written together, each serialized once; a batch of
  materializations written as one;
- in a run: the event batch size set by the code location; a table's per-day metadata added for all its days at once."""

# A check result recorded for a day of a range run must name the materialization it checked: that pointer is what
# the UI compares to colour a day of the check's Partitions view. Dagster fills it in itself only in a
# single-partition step, and exports no way to fill it in for a range run (see recording.py).
# The one change the project makes to Dagster's behaviour: a pool's slot claim that is atomic across processes.
#
# Dagster claims a slot of a pool (lake_writes, whose limit is 1) by selecting a free slot row, then updating that row
# by its id alone. Two processes claiming at the same instant both select the same free row and both update it: both
# steps are told they hold the slot and write the lake at once, which Delta then refuses half-way as a conflict. In
# SQLite the select takes no lock (pysqlite begins a transaction only at the update); in PostgreSQL the storage runs
# in autocommit, so its FOR UPDATE lock is gone when the select returns. The classes below make the update claim the
# row only while it is still free, so exactly one of them gets it and the other waits as Dagster's own loop makes it.
# tests/test_dagster_private.py shows Dagster's claim still lets two in (when that test fails, Dagster fixed it and
# these classes go), and that the project's claim lets one.
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy
from dagster import (
    AssetCheckEvaluation,
    AssetExecutionContext,
    AssetKey,
    DagsterEventType,
    DagsterInvariantViolationError,
    EventLogEntry,
    partition_loading_context,
    serialize_value,
)
from dagster._core.definitions.asset_checks.asset_check_evaluation import (  # noqa: F401
    AssetCheckEvaluationTargetMaterializationData,
)

# The tag an AssetObservation carries its data version in: an observable asset returns versions, but a restatement op
# records the versions of the landing days its batches change as observations, which take it only as this tag.
from dagster._core.definitions.data_version import DATA_VERSION_TAG  # noqa: F401

# The type `define_asset_job` returns, which Dagster does not export: a job factory's annotation names it.
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition  # noqa: F401

# The status of a Dagster backfill, to see whether one is in progress: DagsterInstance.get_backfills takes it, and
# Dagster exports neither it nor a filter that does without it.
from dagster._core.execution.backfill import BulkActionStatus  # noqa: F401
from dagster._core.execution.context.metadata_logging import AssetMetadataHandle, OutputMetadataAccumulator
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.asset_check_state import AssetCheckState, bulk_update_asset_check_state  # noqa: F401
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.event_log.schema import (
    AssetCheckExecutionsTable,
    AssetEventTagsTable,  # noqa: F401
    AssetKeyTable,  # noqa: F401
    ConcurrencySlotsTable,
    SqlEventLogStorageTable,
)
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS

# The run tags by which Dagster gives a run its partition or partition range: a run launched from the command line
# or by a sensor over a range must carry them, and Dagster exports no constant for them.
# BACKFILL_ID_TAG: the tag by which Dagster names the backfill a run belongs to.
from dagster._core.storage.tags import (  # noqa: F401
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    BACKFILL_ID_TAG,
    PARTITION_NAME_TAG,
)
from dagster._core.workspace.context import WorkspaceProcessContext  # noqa: F401
from dagster._core.workspace.load_target import WorkspaceFileTarget  # noqa: F401
from dagster._serdes import ConfigurableClassData
from dagster._utils.concurrency import ConcurrencySlotStatus
from dagster_postgres import PostgresEventLogStorage
from dagster_postgres.utils import create_pg_engine, get_token_provider_from_config, pg_url_from_config
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import QueuePool


class _AtomicSlotClaim:
    index_connection: Callable[[], AbstractContextManager[Connection]]  # the storage's own

    def _claim_concurrency_slot(self, concurrency_key: str, run_id: str, step_key: str) -> ConcurrencySlotStatus:
        slots = ConcurrencySlotsTable.c
        with self.index_connection() as conn:
            free = conn.execute(
                sqlalchemy.select(slots.id)
                .where(slots.concurrency_key == concurrency_key, slots.step_key.is_(None), slots.deleted.is_(False))
                .limit(1)
            ).fetchone()
            if free is None:
                return ConcurrencySlotStatus.BLOCKED
            claimed = conn.execute(
                ConcurrencySlotsTable.update()
                .values(run_id=run_id, step_key=step_key)
                .where(slots.id == free[0], slots.step_key.is_(None))  # still free: Dagster's update lacks this
            ).rowcount
        return ConcurrencySlotStatus.CLAIMED if claimed else ConcurrencySlotStatus.BLOCKED


# A second change, to the SQLite event log's cost alone: Dagster's SQLite storage creates a new SQLAlchemy engine
# for every statement it runs (each with its dialect's first-connect queries) and disposes of it after, and asks
# SQLite whether a table exists with yet another engine each time it writes a check result: several engines per event,
# which is most of what an event costs. Dagster has no setting for it (dagster.yaml configures only the folder). The
# class below keeps one engine and one open SQLite connection per database file for the life of the process (each use
# is its own transaction, under the storage's lock, so nothing is shared between threads or processes), and keeps a
# table once found (tables are never dropped while an instance runs). bench/event_log.py measures what it buys;
# tests/test_dagster_private.py fails when Dagster's `_connect` or `has_table` change.
def _commit_without_fsync(dbapi_connection: Any, _: Any) -> None:
    # In WAL mode (Dagster's), NORMAL syncs at checkpoints rather than at every commit: a crash of the process loses
    # nothing, a crash of the machine may lose the last events written, never the files' consistency; the lake, not
    # the event log, is the record of what is published.
    dbapi_connection.execute("PRAGMA synchronous=NORMAL")


# The database files kept open at once by a process: the index and the runs it writes or reads most recently.
OPEN_DATABASE_FILES = 16


class _EnginePerFile:
    _db_lock: threading.Lock  # the storage's own
    _initialized_dbs: set[str]
    conn_string_for_shard: Callable[[str], str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._engines: dict[str, Engine] = {}
        self._tables_found: set[str] = set()
        super().__init__(*args, **kwargs)

    def _engine(self, shard: str) -> Engine:
        engine = self._engines.pop(shard, None)
        if engine is None:
            connect_args = {"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False}
            # One connection kept open: opening and closing it is what costs.
            engine = sqlalchemy.create_engine(
                self.conn_string_for_shard(shard), poolclass=QueuePool, pool_size=1, connect_args=connect_args
            )
            sqlalchemy.event.listen(engine, "connect", _commit_without_fsync)
        self._engines[shard] = engine  # the most recently used last
        while len(self._engines) > OPEN_DATABASE_FILES:
            self._engines.pop(next(iter(self._engines))).dispose()
        return engine

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)  # type: ignore[attr-defined]
                self._initialized_dbs.add(shard)
            with engine.connect() as conn:
                sqlite = conn.connection.dbapi_connection
                changes = sqlite.total_changes if sqlite else 0
                with conn.begin():
                    yield conn
                if shard != INDEX_SHARD_NAME and sqlite and sqlite.total_changes != changes:
                    # The webserver shows a run's events as they come by watching the run's file for changes; with
                    # the connection open they go to SQLite's write-ahead log beside it, and Dagster's own storage
                    # has the file change only when its last connection closes. Touching it is that signal.
                    os.utime(self.path_for_shard(shard))  # type: ignore[attr-defined]

    def has_table(self, table_name: str) -> bool:
        if table_name in self._tables_found:
            return True
        found = bool(super().has_table(table_name))  # type: ignore[misc]
        if found:
            self._tables_found.add(table_name)
        return found

    def dispose(self) -> None:
        super().dispose()  # type: ignore[misc]
        for engine in self._engines.values():
            engine.dispose()
        self._engines.clear()


# A fourth change, to what a range run's check results cost to store. Dagster stores each check result of a run as
# it comes: the event serialized twice (its row in the event log, then the check's execution row), each statement
# built anew, the index written in two transactions (SQLite) or on two connections (PostgreSQL); a range run records
# one per check per day, tens of thousands a year. A range run's planned check rows serialize the planned event once
# per day, which is most of what creating a run over years of days costs. Dagster batches only the materializations
# it derives from an output (DAGSTER_EVENT_BATCH_SIZE), and has no setting for the rest.
#
# The classes below store the same rows with the same values, but hold a run's check results until the next event of
# any other kind (the step's next output, its end, a materialization), or until CHECK_RESULTS_PER_WRITE are held, and
# write them together: each serialized once, in one transaction of the run's file and one of the index (SQLite), in
# one multi-row INSERT and one UPDATE per planned row sent at once (PostgreSQL). The order of the run's events is
# kept. What a process killed while it holds results loses: those results (the step writing them is then failed by
# run monitoring, and the days it published show their checks as not run until they run again); the materializations
# they check are never held. tests/test_dagster_private.py compares what these classes record with Dagster's own
# storage, row by row, and fails when the methods they replace change.
CHECK_RESULTS_PER_WRITE = 1000
_EVENTS = SqlEventLogStorageTable
_CHECK_EXECUTIONS = AssetCheckExecutionsTable
_INSERT_EVENT = _EVENTS.insert()
_INSERT_CHECK_EXECUTION = _CHECK_EXECUTIONS.insert()
# The execution row its planned event created: (asset, check, run, partition) identify it.
_UPDATE_PLANNED_EXECUTION = (
    _CHECK_EXECUTIONS.update()
    .where(
        _CHECK_EXECUTIONS.c.asset_key == sqlalchemy.bindparam("of_asset"),
        _CHECK_EXECUTIONS.c.check_name == sqlalchemy.bindparam("of_check"),
        _CHECK_EXECUTIONS.c.run_id == sqlalchemy.bindparam("of_run"),
        _CHECK_EXECUTIONS.c.partition == sqlalchemy.bindparam("of_partition"),
    )
    .values(
        execution_status=sqlalchemy.bindparam("status"),
        evaluation_event=sqlalchemy.bindparam("event"),
        evaluation_event_timestamp=sqlalchemy.bindparam("timestamp"),
        evaluation_event_storage_id=sqlalchemy.bindparam("event_id"),
        materialization_event_storage_id=sqlalchemy.bindparam("materialization_id"),
    )
)


def run_check_result(event: EventLogEntry) -> AssetCheckEvaluation | None:
    """The check result an event of a run carries on one partition (what a range run records day by day), else None."""
    dagster_event = event.dagster_event
    if dagster_event is None or not event.run_id:
        return None
    if dagster_event.event_type_value != DagsterEventType.ASSET_CHECK_EVALUATION.value:
        return None
    evaluation = dagster_event.event_specific_data
    return evaluation if isinstance(evaluation, AssetCheckEvaluation) and evaluation.partition else None


@dataclass(frozen=True)
class HeldCheckResult:
    """A run's check result waiting to be written, with its event log row (serialized once)."""

    event: EventLogEntry
    evaluation: AssetCheckEvaluation
    row: dict[str, Any]

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What identifies its execution row: asset, check, run and partition."""
        e = self.evaluation
        return (e.asset_key.to_string(), e.check_name, self.event.run_id, e.partition or "")


class _CheckResultsWrittenTogether:
    _event_to_row: Callable[[EventLogEntry], dict[str, Any]]  # the storage's own
    index_connection: Callable[[], AbstractContextManager[Connection]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._held: list[HeldCheckResult] = []
        self._held_lock = threading.RLock()
        super().__init__(*args, **kwargs)

    def _write_check_results(self, held: list[HeldCheckResult]) -> None:
        raise NotImplementedError  # each storage's own

    def store_event(self, event: EventLogEntry) -> None:
        evaluation = run_check_result(event)
        with self._held_lock:
            if evaluation is None:
                self.write_held_check_results()  # first: the run's events stay in order
                super().store_event(event)  # type: ignore[misc]
                return
            self._held.append(HeldCheckResult(event, evaluation, self._event_to_row(event)))
            if len(self._held) >= CHECK_RESULTS_PER_WRITE:
                self.write_held_check_results()

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        with self._held_lock:
            self.write_held_check_results()
            super().store_event_batch(events)  # type: ignore[misc]

    def write_held_check_results(self) -> None:
        """Write the check results held so far (any other event, and disposing of the storage, write them first)."""
        with self._held_lock:
            held, self._held = self._held, []
            if held:
                self._write_check_results(held)

    def dispose(self) -> None:
        self.write_held_check_results()
        super().dispose()  # type: ignore[misc]

    def _record_check_results(self, conn: Connection, written: list[tuple[HeldCheckResult, int]]) -> None:
        """The check's execution row of each result (of its run and partition), as Dagster's
        `_update_asset_check_evaluation` writes it: the one its planned event created, or a new one; of two results
        for one row, the later is the row's."""
        latest = {result.key: (result, event_id) for result, event_id in written}
        executions = _CHECK_EXECUTIONS.c
        found = conn.execute(
            sqlalchemy.select(executions.asset_key, executions.check_name, executions.run_id, executions.partition)
            .where(executions.run_id.in_({k[2] for k in latest}))
            .where(executions.asset_key.in_({k[0] for k in latest}))
            .where(executions.check_name.in_({k[1] for k in latest}))
            .where(executions.partition.in_({k[3] for k in latest}))
        ).all()
        planned = {tuple(r) for r in found}
        updates, inserts = [], []
        for key, (result, event_id) in latest.items():
            target = result.evaluation.target_materialization_data
            status = (
                AssetCheckExecutionRecordStatus.SUCCEEDED
                if result.evaluation.passed
                else AssetCheckExecutionRecordStatus.FAILED
            ).value
            values = {
                "event": result.row["event"],
                "timestamp": result.row["timestamp"],
                "event_id": event_id,
                "materialization_id": target.storage_id if target else None,
                "status": status,
            }
            if key in planned:
                updates.append(
                    {"of_asset": key[0], "of_check": key[1], "of_run": key[2], "of_partition": key[3], **values}
                )
            else:
                inserts.append(
                    {
                        "asset_key": key[0],
                        "check_name": key[1],
                        "run_id": key[2],
                        "partition": key[3],
                        "execution_status": status,
                        "evaluation_event": values["event"],
                        "evaluation_event_timestamp": values["timestamp"],
                        "evaluation_event_storage_id": event_id,
                        "materialization_event_storage_id": values["materialization_id"],
                    }
                )
        if updates:
            conn.execute(_UPDATE_PLANNED_EXECUTION, updates)
        if inserts:
            conn.execute(_INSERT_CHECK_EXECUTION, inserts)

    def _store_asset_check_evaluation_planned(self, event: EventLogEntry, event_id: int | None) -> None:
        planned = event.get_dagster_event().event_specific_data
        subset = getattr(planned, "partitions_subset", None)
        if subset is None:
            super()._store_asset_check_evaluation_planned(event, event_id)  # type: ignore[misc]
            return
        serialized, timestamp = serialize_value(event), self._event_insert_timestamp(event)  # type: ignore[attr-defined]
        rows = [
            {
                "asset_key": planned.asset_key.to_string(),  # type: ignore[union-attr]
                "check_name": planned.check_name,  # type: ignore[union-attr]
                "partition": partition,
                "run_id": event.run_id,
                "execution_status": AssetCheckExecutionRecordStatus.PLANNED.value,
                "evaluation_event": serialized,
                "evaluation_event_timestamp": timestamp,
                "evaluation_event_storage_id": event_id,
            }
            for partition in subset.get_partition_keys()
        ]
        with self.index_connection() as conn:
            conn.execute(_INSERT_CHECK_EXECUTION, rows)


# A range run's per-day figures on the materializations Dagster derives for a table's days, added for all its days at
# once. Dagster's `add_asset_metadata` (the public way, one partition a call) lists the run's partitions and copies
# every metadata added so far at each call: over thousands of days, quadratic, and most of a full-history run's time
# after its first commit. The function below makes the same additions in one step: the same checks, the same
# accumulated metadata, which Dagster then gives each day's materialization. tests/test_dagster_private.py compares
# the materializations with those of `add_asset_metadata` day by day, and fails when the methods it stands for change.
def add_asset_metadata_by_partition(
    context: AssetExecutionContext, asset_key: AssetKey, by_partition: Mapping[str, Mapping[str, Any]]
) -> None:
    step = context._step_execution_context
    assets = step.assets_def
    if assets is None or asset_key not in assets.keys or assets.partitions_def is None:
        raise DagsterInvariantViolationError(
            f"Attempted to add metadata for asset key '{asset_key}' that is not being materialized."
        )
    with partition_loading_context(dynamic_partitions_store=step.instance):
        targeted = set(assets.partitions_def.get_partition_keys_in_range(partition_key_range=step.partition_key_range))
    outside = sorted(set(by_partition) - targeted)
    if outside:
        raise DagsterInvariantViolationError(
            f"Attempted to add metadata for partition key '{outside[0]}' that is not being targeted."
        )
    merged = dict(step._metadata_accumulator.per_output_metadata)
    for partition, metadata in by_partition.items():
        handle = AssetMetadataHandle(asset_key=asset_key, partition_key=partition)
        merged[handle] = {**merged.get(handle, {}), **metadata}
    step._metadata_accumulator = OutputMetadataAccumulator(per_output_metadata=merged)


# Dagster writes the materializations it derives from a partitioned output (one per day of a range run) in batches only
# when DAGSTER_EVENT_BATCH_SIZE is set in the process that executes the run: `DagsterInstance.handle_new_event` reads
# it at every event, and hands a batch to the storage's `store_event_batch`, which the project's storages write at
# once. Set by the code location in every process that loads it (unless the environment sets it): the command line's,
# and each run's that Dagster launches.
EVENT_BATCH_SIZE = "1000"
EVENT_BATCH_SIZE_VARIABLE = "DAGSTER_EVENT_BATCH_SIZE"


def batch_materializations() -> None:
    os.environ.setdefault(EVENT_BATCH_SIZE_VARIABLE, EVENT_BATCH_SIZE)


# A range run's planned materializations, one per asset and run (naming its days) rather than one per asset and day:
# what DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS does, which Dagster reads through this property of the event
# log storage in whichever process creates a run (the command line, the daemon, the webserver). Declared by the
# storage, it holds in every process the instance is opened in, with no variable to set in each. What it changes: a
# range run that fails no longer marks its days "Failed" in the asset's partitions. The checks say it instead: a run
# refused writes nothing and its failing blocking checks name the days; a run that failed half-way leaves a failing
# up_to_date_with_landing on each day it left behind (recording.partly_published_events).
class _PlannedEventsPerRun:
    @property
    def supports_partition_subset_in_asset_materialization_planned_events(self) -> bool:
        return True


class AtomicClaimSqliteEventLogStorage(
    _AtomicSlotClaim, _PlannedEventsPerRun, _CheckResultsWrittenTogether, _EnginePerFile, SqliteEventLogStorage
):
    """Dagster's SQLite event log storage (the default instance's), with slot claims atomic across processes, one
    engine and open connection per database file, a range run's planned materializations one per asset, check
    results written together, and a batch of materializations written as one."""

    @classmethod
    def from_config_value(  # Dagster's builds its own class by name
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> "AtomicClaimSqliteEventLogStorage":
        return cls(inst_data=inst_data, **config_value)

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """A batch of one run's materializations (Dagster's batches are those it derives from a partitioned output) as
        Dagster's SQLite storage stores each, in one transaction of the run's file and one of the index, the asset's
        entry updated once, with its last event: what dagster-postgres does with a batch. Any other batch event by
        event."""
        kinds = {e.dagster_event_type for e in events}
        runs = {e.run_id for e in events}
        if not events or kinds != {DagsterEventType.ASSET_MATERIALIZATION} or len(runs) != 1:
            super().store_event_batch(events)
            return
        with self._held_lock:
            self.write_held_check_results()
            rows = [self._event_to_row(e) for e in events]
            with self.run_connection(events[0].run_id) as conn:
                conn.execute(_INSERT_EVENT, rows)
            with self.index_transaction() as conn:
                ids = []
                for row in rows:
                    inserted = conn.execute(_INSERT_EVENT, row).inserted_primary_key
                    if inserted is None:
                        raise DagsterInvariantViolationError("Cannot store asset event tags for null event id.")
                    ids.append(int(inserted[0]))
                self._store_asset_event_tags(conn, events, ids)
                last = {e.get_dagster_event().asset_key: (e, i) for e, i in zip(events, ids, strict=True)}
                for event, event_id in last.values():
                    self._store_asset_event(conn, event, event_id)

    def _write_check_results(self, held: list[HeldCheckResult]) -> None:
        """Check results as Dagster's SQLite storage stores each: in its run's file, then mirrored in the index with
        the check's execution row; here one transaction per run file and one of the index for them all."""
        for run_id in dict.fromkeys(h.event.run_id for h in held):
            with self.run_connection(run_id) as conn:
                conn.execute(_INSERT_EVENT, [h.row for h in held if h.event.run_id == run_id])
        with self.index_connection() as conn:
            written = []
            for h in held:
                inserted = conn.execute(_INSERT_EVENT, h.row).inserted_primary_key
                if inserted is None:
                    raise DagsterInvariantViolationError("Cannot store an asset check evaluation with no event id.")
                written.append((h, int(inserted[0])))
            self._record_check_results(conn, written)


# The production profile's runs store their events through PgBouncer (scripts/postgres.sh). Dagster's storage holds no
# connection, by design, so that instances do not accumulate them: each statement takes a connection and gives it
# back, which costs a round trip of its own. Its webserver already holds one open (`optimize_for_webserver`); a run
# process, which writes an event per check per day, holds one too.
POOL_RECYCLE_S = 3600


class AtomicClaimPostgresEventLogStorage(
    _AtomicSlotClaim, _PlannedEventsPerRun, _CheckResultsWrittenTogether, PostgresEventLogStorage
):
    """Dagster's PostgreSQL event log storage (the production profile's), with slot claims atomic across processes,
    a range run's planned materializations one per asset, check results written once and one connection held."""

    def __init__(self, postgres_url: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(postgres_url, *args, **kwargs)
        self._engine.dispose()
        self._engine = create_pg_engine(
            self.postgres_url,
            self._token_provider,
            isolation_level="AUTOCOMMIT",
            pool_size=1,
            pool_recycle=POOL_RECYCLE_S,
            # An UPDATE of many rows sent in pages, not one round trip per row (its INSERTs already are).
            executemany_mode="values_plus_batch",
        )

    @classmethod
    def from_config_value(  # Dagster's builds its own class by name
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> "AtomicClaimPostgresEventLogStorage":
        return cls(
            inst_data=inst_data,
            postgres_url=pg_url_from_config(config_value),
            should_autocreate_tables=config_value.get("should_autocreate_tables", True),
            token_provider=get_token_provider_from_config(config_value),
        )

    def _write_check_results(self, held: list[HeldCheckResult]) -> None:
        """Check results as Dagster's PostgreSQL storage stores each (the event, then the check's execution row), in
        one INSERT of every event and their execution rows sent together, on one connection. (Dagster's also sends a
        NOTIFY per event, which nothing listens to since Dagster polls.)"""
        with self._connect() as conn:
            ids = conn.execute(
                _INSERT_EVENT.returning(_EVENTS.c.id, sort_by_parameter_order=True), [h.row for h in held]
            ).scalars()
            self._record_check_results(conn, list(zip(held, [int(i) for i in ids], strict=True)))
