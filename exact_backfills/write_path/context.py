"""One change on its way through the write path (`Writing`): what it was given, and what each stage leaves for the
next, as one evaluator's plan carries its stages' results."""

import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import date, datetime

from pyspark.sql import SparkSession

from exact_backfills import checks, clock
from exact_backfills.builds import Staged, narrowed
from exact_backfills.calendar import Partitions
from exact_backfills.declare import Pipeline, Reconcile
from exact_backfills.write_path.changes import Change, RunInfo
from resources import audit, control
from resources.delta_io import Commit


@dataclass(frozen=True)
class Started:
    """When a change started: the time its audit rows give, and the clock its figures are timed by."""

    at: datetime
    monotonic: float

    @classmethod
    def now(cls) -> "Started":
        return cls(clock.now(), time.monotonic())


def at_once(change: Change, partitions: Partitions) -> bool:
    """Whether the change checks and commits its tables at once: when each has a few days (`narrowed`), its checks and
    commits cost mostly Spark's and Delta's own steps (scheduling, the log's replay, a version's files), which wait on
    each other less side by side; many days' are work on rows, which would share the same cores. Every table's rows
    are staged and checked before the first commit, so no commit needs another's."""
    return all(narrowed(change.days[table], partitions) for table in change.tables())


def threads(pipeline: Pipeline, change: Change, together: bool) -> ThreadPoolExecutor:
    """The threads Spark jobs that do not depend on each other go to the engine from: a change of a few days checks
    and commits its tables at once (`together`), another one table after the other; both read the audit trail while
    the tables are built."""
    workers = len(pipeline.with_side_tables(change.tables())) + 1 if together else 1
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="publish")


@dataclass
class Writing:
    """A change being written, its days in the graph's order: given, then filled in stage by stage."""

    spark: SparkSession
    pipeline: Pipeline
    change: Change
    run: RunInfo
    started: Started
    holds: list[control.HeldDay]  # the change's days held since a rollback
    together: bool  # `at_once`: its tables checked and committed side by side
    pool: ThreadPoolExecutor
    # Staging: each table's rows, held; interpreted evaluation, when chosen, entered until the change ends.
    staged: dict[str, Staged] = field(default_factory=dict)
    evaluation: ExitStack = field(default_factory=ExitStack)
    # Verifying: the tables whose upstream's measures come from the upstream's checks, and every table's checks.
    reconciled: dict[str, Reconcile] = field(default_factory=dict)
    checking: dict[str, Future[checks.Verified]] = field(default_factory=dict)
    verified: dict[str, checks.Verified] = field(default_factory=dict)
    # What each day held before this run (its own rows left out): read while the tables are built.
    reading_previous: Future[dict[tuple[str, date], audit.DayContent]] | None = None
    previous_content: dict[tuple[str, date], audit.DayContent] = field(default_factory=dict)
    # The intent: per table of the change, the days of tables built from it it leaves stale; the watermark then.
    left_stale: dict[str, dict[str, set[date]]] = field(default_factory=dict)
    watermark: control.Watermark | None = None
    # Committing: the days the change holds once committed (a rollback's), as of when; each table's commit.
    held_at: datetime = field(default_factory=lambda: clock.now())
    held: dict[date, control.HeldDay] = field(default_factory=dict)
    committing: dict[str, Future[dict[str, Commit]]] = field(default_factory=dict)
    commits: dict[str, Commit] = field(default_factory=dict)
    # Recording: the audit trail's rows, appended once every table is committed.
    audit_rows: list[audit.AuditRow] = field(default_factory=list)

    def close(self) -> None:
        """Once the change ends, whichever way: its threads joined, its held rows let go, its evaluation left."""
        self.pool.shutdown(wait=True, cancel_futures=True)
        for built in self.staged.values():
            built.unpersist()
        self.evaluation.close()
