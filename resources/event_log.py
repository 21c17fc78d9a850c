"""Dagster's consolidated SQLite event log, with one pooled engine per process and WAL's `synchronous=NORMAL`.

A range run records one materialization per asset per day and one result per check per day: a 2,406-day history is
tens of thousands of events. The stock storage opens a new engine and connection for every statement and syncs the
disk on every commit; on the benchmark in `bench/event_log.py` that is most of a run's time. Same tables, same file,
same schema: only the connection handling differs. `synchronous=NORMAL` in WAL mode loses no committed event when a
process crashes; only a power failure can cost the last few, and the Delta tables and `backfill_audit`, not this log,
are the record of what was written.
"""

from contextlib import contextmanager
from functools import cached_property

from dagster._core.storage.event_log.sqlite.consolidated_sqlite_event_log import ConsolidatedSqliteEventLogStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from sqlalchemy import create_engine, event


class PooledSqliteEventLogStorage(ConsolidatedSqliteEventLogStorage):
    @cached_property
    def _engine(self):
        engine = create_engine(
            self._conn_string, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False}
        )

        @event.listens_for(engine, "connect")
        def _relaxed_sync(dbapi_connection, _):
            dbapi_connection.execute("PRAGMA synchronous=NORMAL")

        return engine

    @contextmanager
    def _connect(self):
        with self._engine.connect() as conn:
            with conn.begin():
                yield conn

    def has_table(self, table_name: str) -> bool:
        with self._engine.connect() as conn:
            return bool(self._engine.dialect.has_table(conn, table_name))
