"""Everything the project takes from Dagster's private API (no other module imports `dagster._`; a test checks it):
names imported from private modules, methods of Dagster's classes called or replaced. None has a public path in Dagster
1.13.27; each has a guard in tests/test_dagster_private.py, a digest of its source or a test of what the project relies
on, failing when Dagster changes it. Each guard in brackets: words of its test's name, or a digest table's.

Names imported (27), why none is public:
- AssetCheckEvaluationTargetMaterializationData: the materialization a day's check result checked, which the UI
  compares to colour the check's Partitions view; Dagster fills it in only in a one-day step. [check_results_pointer]
- DATA_VERSION_TAG: an observation takes a data version only as this tag. [observation_carries]
- UnresolvedAssetJobDefinition: what `define_asset_job` returns; in annotations only. [define_asset_job_returns]
- BulkActionStatus: `get_backfills` filters by it, to see whether a backfill is under way. [requested_backfill]
- ASSET_PARTITION_RANGE_START_TAG, ASSET_PARTITION_RANGE_END_TAG, PARTITION_NAME_TAG: the run tags that give a run
  launched by the command line or a sensor its days. [partition_tags]
- BACKFILL_ID_TAG: the tag naming the Dagster backfill a run belongs to. [backfill_tag]
- AssetMetadataHandle, OutputMetadataAccumulator: a table's per-day metadata added for all its days at once
  (add_asset_metadata_by_partition). [DAGSTERS_ASSET_METADATA_SHA256, adding_a_tables_days_metadata]
- SqliteEventLogStorage, ConfigurableClassData, ConcurrencySlotStatus, AssetCheckExecutionRecordStatus,
  SQLITE_BUSY_TIMEOUT_SECONDS, INDEX_SHARD_NAME, and the tables AssetCheckExecutionsTable, ConcurrencySlotsTable,
  SqlEventLogStorageTable, AssetEventTagsTable, AssetKeyTable: the event log storage the instance uses is Dagster's
  with the changes below; the tests read its rows (tests/support/event_storage.py). [DAGSTERS_SQLITE_CONNECT_,
  DAGSTERS_CHECK_RESULT_WRITES_, records_every_event, planned_check_days, lake_writes_slot]
- AssetCheckState, bulk_update_asset_check_state: a check's Partitions view as the webserver computes it, for the
  tests (tests/support/late_batches.py). [DAGSTERS_CALLED_SHA256]
- WorkspaceProcessContext, WorkspaceFileTarget: the webserver's application, built as `dagster-webserver` builds it
  (ui_server.py). [workspace_classes]
- create_execution_plan: a run created as the daemon creates it, with planned events (bench/). [planned_check_days]
- DagsterLogManager: its records give a run's events their time, on the simulated clock (item 7). [follows_the_]

Dagster's behaviour the project changes (7), each below beside why: for a fault a test shows or a cost bench/
measures; what of Dagster's each replaces (R) or uses (U):
1. a pool's slot claim atomic across processes. R `_claim_concurrency_slot` [DAGSTERS_CLAIM_SHA256]
2. one engine and open connection per SQLite file. R `_connect`, `has_table`; U `_initdb`, `path_for_shard`,
   `conn_string_for_shard`, `__init__`'s `_db_lock`, `_initialized_dbs` [DAGSTERS_SQLITE_CONNECT_, DAGSTERS_CALLED_]
3. a range run's planned materializations one event per asset. R the storage's
   `supports_partition_subset_in_asset_materialization_planned_events` [plans_a_range_run]
4. a run's check results buffered until its next event, written together. R `store_event`,
   `_store_asset_check_evaluation_planned`; U `_event_to_row`, `_event_insert_timestamp`, PostgreSQL's `_connect`,
   `_engine`, `_token_provider` [DAGSTERS_CHECK_RESULT_WRITES_, DAGSTERS_CALLED_]
5. a batch of materializations written as one (DAGSTER_EVENT_BATCH_SIZE: event_log_writes.py). R `store_event_batch`;
   U `_store_asset_event_tags`, `_store_asset_event`, `index_transaction` [DAGSTERS_CALLED_, records_every_event]
6. a table's per-day metadata added for all its days at once. U the step context's `_step_execution_context`,
   `_metadata_accumulator` [DAGSTERS_ASSET_METADATA_]
7. Dagster's "now" from the project's clock when simulated. R `dagster._time`'s `_mockable_` pair, the log manager's
   `makeRecord`, the scheduler's `_get_next_scheduler_iteration_time`, the daemon controller's `get_current_timestamp`
   (the wall clock) and `get_daemon_statuses` (given now); U `dagster._daemon.cli.main` [DAGSTERS_CLOCK_]"""

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import dagster._time as dagster_time
import sqlalchemy
from dagster import (
    AssetExecutionContext,
    AssetKey,
    DagsterEventType,
    DagsterInvariantViolationError,
    EventLogEntry,
    partition_loading_context,
)
from dagster._core.definitions.asset_checks.asset_check_evaluation import (  # noqa: F401
    AssetCheckEvaluationTargetMaterializationData,
)
from dagster._core.definitions.data_version import DATA_VERSION_TAG  # noqa: F401
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition  # noqa: F401
from dagster._core.execution.api import create_execution_plan  # noqa: F401
from dagster._core.execution.backfill import BulkActionStatus  # noqa: F401
from dagster._core.execution.context.metadata_logging import AssetMetadataHandle, OutputMetadataAccumulator
from dagster._core.log_manager import DagsterLogManager
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

from exact_backfills import clock
from exact_backfills.event_log_writes import (
    CHECK_RESULTS_PER_WRITE,
    OPEN_DATABASE_FILES,
    POOL_RECYCLE_S,
    BufferedCheckResult,
    execution_rows,
    latest_results,
    planned_among,
    planned_execution_deletion,
    planned_rows,
    run_check_result,
    sync_at_checkpoints,
)


# 1. A pool's slot claim atomic across processes. Dagster claims a slot of a pool (lake_writes, limit 1) by selecting
# a free slot row, then updating that row by its id alone: two processes claiming at once both select the same row and
# both update it, so both steps write the lake at once and Delta refuses one half-way. (SQLite's select takes no lock;
# PostgreSQL's storage runs in autocommit, so its FOR UPDATE lock is gone when the select returns.) The update below
# claims the row only while it is still free. tests/test_dagster_private.py shows Dagster's claim still lets two in
# (when that fails, Dagster fixed it and this class goes), and that the project's lets one.
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


# 2. The SQLite event log's cost: Dagster's SQLite storage creates a new SQLAlchemy engine for every statement it runs
# (each with its dialect's first-connect queries) and disposes of it after, and asks SQLite whether a table exists with
# yet another engine each time it writes a check result: several engines per event, most of what an event costs.
# Dagster has no setting for it (dagster.yaml configures only the folder). The class below keeps one engine and one
# open SQLite connection per database file for the life of the process (each use is its own transaction, under the
# storage's lock, so nothing is shared between threads or processes), and keeps a table once found (tables are never
# dropped while an instance runs). bench/event_log.py measures what it buys.
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
            engine = sqlalchemy.create_engine(
                self.conn_string_for_shard(shard), poolclass=QueuePool, pool_size=1, connect_args=connect_args
            )
            sqlalchemy.event.listen(engine, "connect", sync_at_checkpoints)
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
        if table_name not in self._tables_found and super().has_table(table_name):  # type: ignore[misc]
            self._tables_found.add(table_name)
        return table_name in self._tables_found

    def dispose(self) -> None:
        super().dispose()  # type: ignore[misc]
        for engine in self._engines.values():
            engine.dispose()
        self._engines.clear()


# 4. What a range run's check results cost to store. Dagster stores each as it comes: the event serialized twice (event
# row, execution row), each statement built anew, the index written in two transactions (SQLite) or on two connections
# (PostgreSQL), one per check per day, and a planned check row serializes the planned event once per day. The classes
# below store the same rows (a test compares them row by row) but buffer a run's check results until its next event
# of another kind, or CHECK_RESULTS_PER_WRITE of them, and write them together, each serialized once, in order. A
# process killed while it buffers loses those (its step fails; its days show their checks not run), never a
# materialization.
_EVENTS = SqlEventLogStorageTable
_CHECK_EXECUTIONS = AssetCheckExecutionsTable
_INSERT_EVENT = _EVENTS.insert()
_INSERT_CHECK_EXECUTION = _CHECK_EXECUTIONS.insert()
_RESULT_STATUS = {
    True: AssetCheckExecutionRecordStatus.SUCCEEDED.value,
    False: AssetCheckExecutionRecordStatus.FAILED.value,
}
_PLANNED = AssetCheckExecutionRecordStatus.PLANNED.value
_DELETE_PLANNED_EXECUTION = planned_execution_deletion(_CHECK_EXECUTIONS)


class _CheckResultsWrittenTogether:
    _event_to_row: Callable[[EventLogEntry], dict[str, Any]]  # the storage's own
    index_connection: Callable[[], AbstractContextManager[Connection]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._buffered: list[BufferedCheckResult] = []
        self._buffer_lock = threading.RLock()
        super().__init__(*args, **kwargs)

    def _write_check_results(self, buffered: list[BufferedCheckResult]) -> None:
        raise NotImplementedError  # each storage's own

    def store_event(self, event: EventLogEntry) -> None:
        evaluation = run_check_result(event)
        with self._buffer_lock:
            if evaluation is None:
                self.write_buffered_check_results()  # first: the run's events stay in order
                super().store_event(event)  # type: ignore[misc]
                return
            self._buffered.append(BufferedCheckResult(event, evaluation, self._event_to_row(event)))
            if len(self._buffered) >= CHECK_RESULTS_PER_WRITE:
                self.write_buffered_check_results()

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        with self._buffer_lock:
            self.write_buffered_check_results()
            super().store_event_batch(events)  # type: ignore[misc]

    def write_buffered_check_results(self) -> None:
        """Write the check results buffered so far (any other event, and disposing of the storage, write them first)."""
        with self._buffer_lock:
            buffered, self._buffered = self._buffered, []
            if buffered:
                self._write_check_results(buffered)

    def dispose(self) -> None:
        self.write_buffered_check_results()
        super().dispose()  # type: ignore[misc]

    def _record_check_results(self, conn: Connection, written: list[tuple[BufferedCheckResult, int]]) -> None:
        """The check's execution row of each result (of its run and partition), as Dagster's
        `_update_asset_check_evaluation` writes it, but new, replacing the one its planned event created; of two
        results for one row, the later is the row's."""
        latest = latest_results(written)
        planned = {tuple(r) for r in conn.execute(planned_among(_CHECK_EXECUTIONS, latest)).all()}
        rows = execution_rows(latest, planned, _RESULT_STATUS)
        if rows.replaced:  # then new rows: a day's newest row is Dagster's current result (execution_rows)
            conn.execute(_DELETE_PLANNED_EXECUTION, rows.replaced)
        if rows.inserts:
            conn.execute(_INSERT_CHECK_EXECUTION, rows.inserts)

    def _store_asset_check_evaluation_planned(self, event: EventLogEntry, event_id: int | None) -> None:
        planned = event.get_dagster_event().event_specific_data
        subset = getattr(planned, "partitions_subset", None)
        if subset is None:
            super()._store_asset_check_evaluation_planned(event, event_id)  # type: ignore[misc]
            return
        timestamp = self._event_insert_timestamp(event)  # type: ignore[attr-defined]
        rows = planned_rows(event, planned, subset.get_partition_keys(), timestamp, event_id, _PLANNED)
        with self.index_connection() as conn:
            conn.execute(_INSERT_CHECK_EXECUTION, rows)


# 6. A range run's per-day figures added for all its days at once. Dagster's `add_asset_metadata` (one partition a call)
# lists the run's partitions and copies all metadata added so far at each call: quadratic over thousands of days. This
# makes the same additions in one step; tests/test_dagster_private.py compares the materializations day by day.
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


# 3. A range run's planned materializations, one per asset and run (naming its days), not one per asset and day: what
# DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS does, read through this property of the storage in any process that
# creates a run. A failed range run no longer marks its days "Failed" in the asset's partitions; the checks say it: a
# refused run's failing blocking checks name the days, one failed half-way leaves up_to_date_with_landing failing.
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
        with self._buffer_lock:
            self.write_buffered_check_results()
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

    def _write_check_results(self, buffered: list[BufferedCheckResult]) -> None:
        """Check results as Dagster's SQLite storage stores each: in its run's file, then mirrored in the index with
        the check's execution row; here one transaction per run file and one of the index for them all."""
        for run_id in dict.fromkeys(h.event.run_id for h in buffered):
            with self.run_connection(run_id) as conn:
                conn.execute(_INSERT_EVENT, [h.row for h in buffered if h.event.run_id == run_id])
        with self.index_connection() as conn:
            written = []
            for h in buffered:
                inserted = conn.execute(_INSERT_EVENT, h.row).inserted_primary_key
                if inserted is None:
                    raise DagsterInvariantViolationError("Cannot store an asset check evaluation with no event id.")
                written.append((h, int(inserted[0])))
            self._record_check_results(conn, written)


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

    def _write_check_results(self, buffered: list[BufferedCheckResult]) -> None:
        """Check results as Dagster's PostgreSQL storage stores each (the event, then the check's execution row), in
        one INSERT of every event and their execution rows sent together, on one connection. (Dagster's also sends a
        NOTIFY per event, which nothing listens to since Dagster polls.)"""
        with self._connect() as conn:
            ids = conn.execute(
                _INSERT_EVENT.returning(_EVENTS.c.id, sort_by_parameter_order=True), [h.row for h in buffered]
            ).scalars()
            self._record_check_results(conn, list(zip(buffered, [int(i) for i in ids], strict=True)))


# 7. Dagster's "now" from the simulated clock (clock.py), as `freeze_time` does: on the project's import, in the daemon.
def follow_the_clock() -> bool:
    if clock.simulated() is None:
        return False
    dagster_time._mockable_get_current_datetime = clock.now
    dagster_time._mockable_get_current_timestamp = lambda: clock.now().timestamp()
    DagsterLogManager.makeRecord = _clocked_record  # type: ignore[method-assign]
    return True


def _clocked_record(self: logging.Logger, *args: Any, **kwargs: Any) -> logging.LogRecord:
    record = logging.Logger.makeRecord(self, *args, **kwargs)
    record.created = clock.now().timestamp()
    record.msecs = (record.created % 1) * 1000
    return record


def run_daemon() -> None:  # `dagster-daemon` (its command line, the same daemon) on the project's clock
    from dagster._daemon import controller
    from dagster._daemon.cli import main
    from dagster._scheduler import scheduler  # imported after the daemon's modules, which it imports in turn

    if follow_the_clock():
        scheduler._get_next_scheduler_iteration_time = lambda start_time: start_time + 2  # not the next minute
        # The controller's loop (a workspace reload, every code server restarted, each 60 s) on the wall clock it
        # starts from: on now, it reloaded at each check after a jump. Its threads' heartbeats, stamped by now, by now.
        controller.get_current_timestamp = time.time
        statuses, now = controller.get_daemon_statuses, dagster_time.get_current_timestamp
        controller.get_daemon_statuses = lambda *a, **k: statuses(*a, **{"curr_time_seconds": now(), **k})
    sys.argv[0] = "dagster-daemon"
    main()
