"""Every name the project takes from Dagster's private modules, in one place, each with why no public API serves.
tests/test_dagster_private.py fails loudly when Dagster moves or changes any of them: that is the signal to look
for the public API that replaces it.

Most are the string constants Dagster itself reads from run tags and observations; one is a class. And one is a
change of behaviour: the event log storage classes whose pool slot claim is atomic (below)."""

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
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

import sqlalchemy
from dagster._core.definitions.asset_checks.asset_check_evaluation import (  # noqa: F401
    AssetCheckEvaluationTargetMaterializationData,
)

# The name of the job Dagster runs the UI's backfills and materializations as: runs of it write the lake too.
from dagster._core.definitions.assets.job.asset_job import IMPLICIT_ASSET_JOB_NAME  # noqa: F401

# The tag an AssetObservation carries its data version in: an observable asset returns versions, but a restatement op
# records the versions of the landing days its batches change as observations, which take it only as this tag.
from dagster._core.definitions.data_version import DATA_VERSION_TAG  # noqa: F401

# A step that failed only because a blocking check failed raises this: a checks-only run reports those checks itself,
# so its step failures are not repeated. Dagster does not export the class.
from dagster._core.errors import DagsterAssetCheckFailedError  # noqa: F401

# The status of a Dagster backfill, to see whether one is in progress: DagsterInstance.get_backfills takes it, and
# Dagster exports neither it nor a filter that does without it.
from dagster._core.execution.backfill import BulkActionStatus  # noqa: F401
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.event_log.schema import ConcurrencySlotsTable

# The run tags by which Dagster gives a run its partition or partition range: a run launched from the command line
# or by a sensor over a range must carry them, and Dagster exports no constant for them.
# BACKFILL_ID_TAG: the tag by which Dagster names the backfill a run belongs to.
from dagster._core.storage.tags import (  # noqa: F401
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    BACKFILL_ID_TAG,
    PARTITION_NAME_TAG,
)
from dagster._serdes import ConfigurableClassData
from dagster._utils.concurrency import ConcurrencySlotStatus
from dagster_postgres import PostgresEventLogStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config
from sqlalchemy.engine import Connection


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


class AtomicClaimSqliteEventLogStorage(_AtomicSlotClaim, SqliteEventLogStorage):
    """Dagster's SQLite event log storage (the default instance's), with slot claims atomic across processes."""

    @classmethod
    def from_config_value(  # Dagster's builds its own class by name
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> "AtomicClaimSqliteEventLogStorage":
        return cls(inst_data=inst_data, **config_value)


class AtomicClaimPostgresEventLogStorage(_AtomicSlotClaim, PostgresEventLogStorage):
    """Dagster's PostgreSQL event log storage (the production profile's), with slot claims atomic across processes."""

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
