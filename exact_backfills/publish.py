"""The one write path: every change to published days goes through `publish`, whatever asked for it (a backfill's run,
a restatement, a rollback, a release of held days).

A change is a plan of (table -> days) and, for each table, where its rows come from (`RowSource`): built from the
landing and its upstream tables, built by the table's restatement build from the batches just read, or read as of an
earlier Delta version. `publish` takes it through these stages, the whole graph at each stage:
- build (or read): every table's days, in the graph's order; a table reads its upstream tables' days from what this
  change stages for them, and any other day from what is published;
- verify: every blocking check of every table on every day. One failing day and nothing at all is written
  (reconcile before publish, across the graph): `Refused`;
- intent: for a backfill or a release, the days built from the days it changes that it does not write itself (a
  trailing window's later days, say) are recorded as pending in the watermark, for the next restatement;
- commit: replace exactly the days (`overwrite_days`, the one call site of the package), one Delta commit per table,
  a side table just before its table: all at once for a change of a few days (`at_once`), else in the graph's order;
- record: as each table is committed, its check results and each day's figures for Dagster (fingerprints, row-count
  changes; a table that publishes late rows settles their exceptions), handed to the caller at once (`publishing`);
  once every table is committed, the effects the change declares (a rollback holds its days, a release releases
  them) and the audit trail (one append).

A failure during the commits or after them raises PartlyPublished, which says which tables were committed for which
days; the days are then repaired by running the same change again (see automation.late_data_sensor)."""

import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from enum import Enum
from typing import Any, TypeVar

from dagster import DagsterRun
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from exact_backfills import builds, checks, code_versions, dependencies
from exact_backfills.builds import LandedBatches, ReadDays, Staged, narrowed
from exact_backfills.dagster_names import CLI_BACKFILL_TAG, RELEASE_TAG
from exact_backfills.dagster_private import BACKFILL_ID_TAG
from exact_backfills.declare import Declared, Pipeline, Reconcile, Staging
from exact_backfills.partitions import last_day
from exact_backfills.pipelines import command
from resources import audit, control
from resources.delta_io import (
    Commit,
    Scan,
    day_filter,
    day_runs,
    overwrite_days,
    read_days,
    read_path,
    scalar,
    scan_of_table,
    table_exists,
)
from resources.lake import shadow_path, table_path
from resources.settings import Codegen, settings
from resources.spark import evaluation_for, interpreted


class Operation(Enum):
    """Why days change: named in every commit, audit row and message of the change."""

    BACKFILL = "backfill"  # built from the landing: a run of the assets (the UI's, the command line's, a repair)
    RESTATEMENT = "restatement"  # the days batches landed since the watermark change
    ROLLBACK = "rollback"  # read as of earlier Delta versions, then held
    RELEASE = "release"  # days held since a rollback, built from the landing again, then released
    PROMOTION = "promotion"  # the days a plan for a code change found changed, from its shadow tables

    @property
    def verb(self) -> str:
        return "restored" if self is Operation.ROLLBACK else "written"

    def refusal_hint(self) -> str:
        if self is Operation.ROLLBACK:
            return "Roll back the tables it is built from too (--before-run RUN restores everything a run wrote)."
        return (
            "Fix the rows the failing checks name (or withdraw the landed file they come from), then run the same "
            "days again; `check` shows what is published now."
        )


@dataclass(frozen=True)
class Rebuilt:
    """Rows built by the table's build, from the landing and its upstream tables."""


@dataclass(frozen=True)
class Restated:
    """Rows built by the table's restatement build, from what it holds plus the batches just read."""

    landed: LandedBatches


@dataclass(frozen=True)
class Restored:
    """Rows as of an earlier Delta version of the table (-1: before it existed), and of its side tables', on the days
    restored (`days`; empty: every day of the change). The change's other days of the table are rebuilt from what the
    change leaves upstream: the days its restored upstream days reach through a day dependency."""

    version: int
    side_versions: dict[str, int] = field(default_factory=dict)
    built_by: str | None = None  # the code version that wrote that version (None: not recorded)
    days: frozenset[date] = frozenset()

    def restores(self, day: date) -> bool:
        return not self.days or day in self.days


@dataclass(frozen=True)
class FromPlan:
    """Rows a plan built beside the lake (its shadow tables), with the code loaded now."""

    plan_id: str


RowSource = Rebuilt | Restated | Restored | FromPlan


# In each day's materialization metadata: the code version that built the day.
CODE_VERSION = "code_version"


def built_by(pipeline: Pipeline, table: str, source: RowSource, day: date | None = None) -> str | None:
    """The code version of the rows a source gives (on `day`): the code loaded now, unless they are restored older
    rows. A commit mixing restored and rebuilt days names the restored rows' code."""
    if isinstance(source, Restored) and (day is None or source.restores(day)):
        return source.built_by
    return code_versions.current(pipeline)[table]


@dataclass(frozen=True)
class Hold:
    """Why a rollback holds its days (the range it restores, not the days it rebuilds beyond it), and the landed
    batches with rows on them then."""

    why: str
    batches: str
    days: tuple[date, ...] = ()


@dataclass(frozen=True)
class Change:
    """Days to change: table -> days, where each table's rows come from (Rebuilt unless said), and why."""

    operation: Operation
    days: dict[str, list[date]]
    sources: dict[str, RowSource] = field(default_factory=dict)
    hold: Hold | None = None  # a rollback's: its days are held once committed
    note: dict[str, Any] = field(default_factory=dict)  # more for every commit's userMetadata (a promotion's plan)

    def source(self, table: str) -> RowSource:
        return self.sources.get(table, Rebuilt())

    def tables(self) -> list[str]:
        """The tables it writes, in the order its days are given (publish order, once `publishing` has it)."""
        return [t for t in self.days if self.days[t]]

    def every_day(self) -> list[date]:
        return sorted({d for days in self.days.values() for d in days})


@dataclass(frozen=True)
class RunInfo:
    """Who writes: recorded in every Delta commit, the audit trail and quarantine rows."""

    run_id: str
    backfill_id: str | None = None

    @classmethod
    def of(cls, run: DagsterRun) -> "RunInfo":
        """A Dagster run's: its backfill is Dagster's (the UI's) or the command line's."""
        return cls(run.run_id, run.tags.get(BACKFILL_ID_TAG) or run.tags.get(CLI_BACKFILL_TAG))


def operation_of(run: DagsterRun) -> Operation:
    """What a run of the assets does: a release when tagged so, else a backfill."""
    return Operation.RELEASE if run.tags.get(RELEASE_TAG) == "true" else Operation.BACKFILL


@dataclass
class Publication:
    days: list[date]
    outcomes: list[checks.Outcome]  # every check result, one per check per day
    metadata: dict[str, dict[date, dict[str, Any]]]  # per table written (and its side tables): each day's figures
    totals: dict[str, dict[str, Any]] = field(default_factory=dict)  # per table written: the run's figures
    # Per table built from this one: the days this table's changed days leave stale outside the change, recorded
    # pending for the next restatement.
    left_stale: dict[str, list[date]] = field(default_factory=dict)
    side_outcomes: dict[str, list[checks.Outcome]] = field(default_factory=dict)  # per side table written: its checks


def day_ranges(days: list[date]) -> str:
    return ", ".join(f"{a}..{b}" if a != b else str(a) for a, b in day_runs(days))


def _first_items(lines: list[str], most: int) -> str:
    return "; ".join(lines[:most]) + (f"; and {len(lines) - most} more" if len(lines) > most else "")


class Refused(RuntimeError):
    """Nothing was written, in any table: a blocking check failed on some table's day (`failing`), or days of the
    change are held since a rollback (`holds`)."""

    def __init__(
        self,
        change: Change,
        failing: dict[str, list[checks.Outcome]] | None = None,
        holds: list[control.HeldDay] | None = None,
        release: str = "release",
    ):
        self.change, self.failing, self.holds = change, failing or {}, holds or []
        op, days = change.operation, day_ranges(change.every_day())
        if self.holds:
            message = (
                f"{op.value} of {days} refused, nothing {op.verb}: {len(self.holds)} day(s) held since a "
                f"rollback: {_first_items([h.describe() for h in self.holds], 5)}. Publish them again with "
                f"`{release} --start D1 --end D2`, or leave them out."
            )
        else:
            lines = [
                f"{o.check} of {t} on {o.day}: {checks.summary(o)}"
                for t, outcomes in self.failing.items()
                for o in outcomes
            ]
            message = (
                f"{op.value} of {days} refused, nothing {op.verb} in any of {', '.join(change.tables())}: "
                f"blocking checks failed in {', '.join(self.failing)}: {_first_items(lines, 10)}. "
                f"{op.refusal_hint()}"
            )
        super().__init__(message)

    @property
    def failing_days(self) -> list[str]:
        return sorted({o.day.isoformat() for outcomes in self.failing.values() for o in outcomes})


class PartlyPublished(RuntimeError):
    """The change failed after committing some of its tables: those hold its days, the others their previous
    content. Making the same change again publishes them all."""

    def __init__(self, pipeline: Pipeline, change: Change, commits: dict[str, Commit], cause: BaseException):
        # Side tables have their table's days.
        self.plan = {
            name: change.days[pipeline.side_table_of.get(name, name)]
            for name in pipeline.with_side_tables(change.tables())
        }
        self.operation, self.commits, self.cause = change.operation, commits, cause
        self.not_committed = [t for t in self.plan if t not in commits]
        committed = ", ".join(
            f"{t} ({f'version {c.version}' if c.version is not None else 'no change'}, {day_ranges(self.plan[t])})"
            for t, c in commits.items()
        )
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
        super().__init__(
            f"{self.operation.value} failed after committing {committed}; not committed: "
            f"{', '.join(self.not_committed) or 'none'} ({type(cause).__name__}: {first}). These days are published in "
            f"some tables only until the same {self.operation.value} is run again."
        )


# For the fault-injection tests: EXACT_BACKFILLS_KILL_AT=<point> kills this process with SIGKILL when it reaches that
# point, as an OOM kill or a lost machine would: "before-commits" (built and verified, nothing committed),
# "commit:<table>" (just after that table's commit), "before-watermark" (a restatement's commits done, its watermark
# not yet advanced).
KILL_AT = "EXACT_BACKFILLS_KILL_AT"


def fault_point(name: str) -> None:
    if os.environ.get(KILL_AT) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def publish(spark: SparkSession, pipeline: Pipeline, change: Change, run: RunInfo) -> dict[str, Publication]:
    """Publish `change` as a whole: build, verify, commit, record (see the module's docstring). Raises Refused, having
    written nothing, when a blocking check fails or (for a backfill or restatement) a day is held since a rollback;
    PartlyPublished when a failure comes after the first commit."""
    return dict(publishing(spark, pipeline, change, run))


def publishing(
    spark: SparkSession, pipeline: Pipeline, change: Change, run: RunInfo
) -> Iterator[tuple[str, Publication]]:
    """`publish`, yielding each table's publication once its commit is made. The commits and their records go on in
    a thread of their own, so that a caller recording one table's days in Dagster does so while the next table is
    committed. Raises as `publish` does, a PartlyPublished after the publications of the tables committed before."""
    started = datetime.now(UTC)
    t0 = time.monotonic()
    unknown = [t for t in change.tables() if t not in pipeline.by_name]
    if unknown:
        raise ValueError(f"not tables of pipeline {pipeline.name}: {', '.join(unknown)}")
    change = replace(
        change, days={t: sorted(set(change.days[t])) for t in pipeline.publish_order if change.days.get(t)}
    )
    holds = control.open_holds(spark, pipeline.name, change.every_day()) if change.every_day() else []
    if holds and change.operation in (Operation.BACKFILL, Operation.RESTATEMENT, Operation.PROMOTION):
        raise Refused(change, holds=holds, release=f"{command(pipeline)} release")
    staged: dict[str, Staged] = {}
    evaluation = ExitStack()
    # Spark jobs that do not depend on each other go to the engine from this pool's threads: a change of a few days
    # checks and commits its tables at once (`at_once`), another one table after the other; both read the audit trail
    # while the tables are built.
    together = at_once(change)
    workers = len(pipeline.with_side_tables(change.tables())) + 1 if together else 1
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="publish")
    try:
        # What each day held before this run, read while the tables are built (this run's own rows are left out).
        previous_content = pool.submit(audit.latest_before_run, spark, pipeline.name, run.run_id, change.every_day())
        checking: dict[str, Future[checks.Verified]] = {}
        tables = pipeline.by_name
        # A change of many days checks one table after another: a table's upstream measures then come from the
        # upstream's pass. A few days' tables are checked at once, each on its own, none waiting for another.
        reconciled = {} if together else reconciled_within(pipeline, change)

        def check(table: str) -> None:
            downstream = {d: rec for d, rec in reconciled.items() if rec.upstream == table}
            upstream = checking[reconciled[table].upstream] if table in reconciled else None
            checking[table] = pool.submit(
                _verify, staged[table], tables[table], change.days[table], downstream, upstream
            )

        for table in change.tables():
            built = _built(spark, pipeline, tables[table], change, staged)
            if not staged and _interpreted(built.scans):
                evaluation.enter_context(interpreted(spark))
            staged[table] = hold(pipeline, built, tables[table], change)
            if together:  # its rows are computed (a few days' are checkpointed): checked while the next builds
                check(table)
        if not together:  # checked once every table is built, in the graph's order
            for table in change.tables():
                check(table)
        verified = {table: checking[table].result() for table in change.tables()}
        failing = {table: v.failing for table, v in verified.items() if v.failing}
        if failing:
            raise Refused(change, failing)
        yield from _ahead(
            lambda: _commit_and_record(
                spark,
                pipeline,
                staged,
                change,
                run,
                verified,
                holds,
                previous_content.result(),
                started,
                t0,
                pool,
                together,
            )
        )
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        for built in staged.values():
            built.unpersist()
        evaluation.close()


def _interpreted(scans: list[Scan]) -> bool:
    """Whether a change whose first table reads `scans` is evaluated interpreted: SPARK_CODEGEN=auto chooses from what
    that table reads (the landing, or the published days of its upstream), which bounds the rows the change flows."""
    if not scans or settings().codegen is not Codegen.AUTO:  # a plan's rows, an earlier version's: as configured
        return False
    return evaluation_for(sum(scan.bytes for scan in scans)) is Codegen.INTERPRETED


@dataclass(frozen=True)
class _Failed:
    error: BaseException


_END = object()
T = TypeVar("T")


def _ahead(items: Callable[[], Iterator[T]]) -> Iterator[T]:
    """`items()`, produced on a thread of its own as fast as it goes and yielded here as each is ready; its error
    raised here after the items before it. Closing this generator early still waits for the thread to finish."""
    ready: queue.Queue = queue.Queue()

    def produce() -> None:
        try:
            for item in items():
                ready.put(item)
            ready.put(_END)
        except BaseException as error:
            ready.put(_Failed(error))

    worker = threading.Thread(target=produce, name="publish-commits", daemon=True)
    worker.start()
    try:
        while (item := ready.get()) is not _END:
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        worker.join()


def _built(
    spark: SparkSession, pipeline: Pipeline, table: Declared, change: Change, staged: dict[str, Staged]
) -> Staged:
    """The table's rows for the change's days, from its source, not computed yet."""
    scans: list[Scan] = []
    day_column = pipeline.day_column

    def published(upstream: str, days: list[date]) -> DataFrame:
        df = read_days(spark, upstream, day_column[upstream], days)
        scans.append(scan_of_table(df, upstream))
        return df

    def read(upstream: str, days: list[date]) -> DataFrame:
        """`upstream`'s rows of `days`: this change's where it stages them, the published ones elsewhere."""
        if upstream not in staged:
            return published(upstream, days)
        ours = set(change.days[upstream])
        mine, rest = sorted(set(days) & ours), sorted(set(days) - ours)
        built = staged[upstream].table
        parts = [built if set(mine) == ours else built.where(day_filter(day_column[upstream], mine))] if mine else []
        if rest and table_exists(upstream):
            parts.append(published(upstream, rest))
        if not parts:
            return built.limit(0)
        return parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])

    days = change.days[table.name]
    source = change.source(table.name)
    if isinstance(source, Restored):
        result = _restored(spark, pipeline, table, source, days, read)
    elif isinstance(source, FromPlan):
        result = _from_plan(pipeline, table, source, days, read, spark)
    elif isinstance(source, Restated) and isinstance(table, Staging) and table.events:
        result = builds.restate_events(spark, table, source.landed, days)
    else:
        result = builds.build(spark, pipeline, table, days, read)
    result.scans = [*result.scans, *scans]
    return result


def hold(pipeline: Pipeline, built: Staged, table: Declared, change: Change) -> Staged:
    """`built`, its rows held so that they are checked, read downstream and written from the same computed rows.

    Cached rows are held partitioned by day, as `overwrite_days` lays them out to write them: Spark then finds them
    so and exchanges none of them again, neither for the write nor for what groups them by day (the checks' distinct
    keys, a downstream table grouping by the day and more). Within a partition they are sorted by day and key, once:
    the write, which orders its rows by day, then sorts nothing; the distinct keys' sort finds its rows in order; what
    groups them by day aggregates one day after another. A checkpoint keeps neither."""
    if built.selects_held:
        return built
    if checkpointed(pipeline, table, change, built.scans):
        built.table = built.table.localCheckpoint()
    else:
        by_day = built.table.repartition(table.day_column)
        built.table = by_day.sortWithinPartitions(table.day_column, *table.key).persist()
    return built


def checkpointed(pipeline: Pipeline, table: Declared, change: Change, scans: list[Scan]) -> bool:
    """Whether a table's staged rows are held as a local checkpoint (computed at once, stored as rows, the plan cut)
    rather than cached (computed by their first use, stored compressed by column).

    A write to a table makes Spark recompute every cached frame computed from it, so rows computed from a table the
    change writes are checkpointed: its own rows (a restatement's build reads what the table holds, a restore an
    earlier version of it) or an upstream's published days (`scans`). Of the others, a narrowed build's (a few days)
    are checkpointed too, which costs less than caching few rows; the rows of most of the history are cached, held in
    less memory than as rows."""
    source = change.source(table.name)
    if isinstance(source, Restored) or (isinstance(source, Restated) and isinstance(table, Staging) and table.events):
        return True
    if not {scan.source for scan in scans}.isdisjoint(pipeline.with_side_tables(change.tables())):
        return True
    return narrowed(change.days[table.name])


def rows_as_of(spark: SparkSession, table: str, day_column: str, version: int, days: list[date]) -> DataFrame:
    """The table's rows of `days` as of `version` (none before the table existed)."""
    if version < 0:
        return read_days(spark, table, day_column, days).where(F.lit(False))
    old = spark.read.format("delta").option("versionAsOf", version).load(table_path(table))
    return old.where(day_filter(day_column, days))


def _from_plan(
    pipeline: Pipeline, table: Declared, source: FromPlan, days: list[date], read: ReadDays, spark: SparkSession
) -> Staged:
    """A table's days as a plan built them (its side tables' too), with its upstream to reconcile with as this change
    leaves it. Nothing lost was checked when the plan built them."""
    rec = table.reconcile
    shadow = {name: shadow_path(source.plan_id, name) for name in [table.name, *(s.name for s in table.side_tables)]}
    return Staged(
        table=read_path(spark, shadow[table.name], table.day_column, days),
        upstream=read(rec.upstream, days) if rec else None,
        upstream_day=pipeline.day_column[rec.upstream] if rec else None,
        side_tables={s.name: read_path(spark, shadow[s.name], s.day_column, days).persist() for s in table.side_tables},
    )


def _restored(
    spark: SparkSession, pipeline: Pipeline, table: Declared, source: Restored, days: list[date], read: ReadDays
) -> Staged:
    """A table's days as of an earlier version, with its upstream to reconcile with as this change leaves it; its
    days the change does not restore (reached through a day dependency from a restored upstream day) rebuilt from
    that upstream. Nothing lost is not checked: the days are held, what landed for them left out on purpose."""
    rec = table.reconcile
    column = pipeline.day_column
    restored = [d for d in days if source.restores(d)]
    rows = rows_as_of(spark, table.name, table.day_column, source.version, restored)
    rebuilt = [d for d in days if not source.restores(d)]
    if rebuilt:
        assert not table.side_tables, f"{table.name}: a table with side tables is restored on every day it writes"
        rows = rows.unionByName(builds.build(spark, pipeline, table, rebuilt, read).table)
    return Staged(
        table=rows,
        upstream=read(rec.upstream, days) if rec else None,
        upstream_day=column[rec.upstream] if rec else None,
        side_tables={
            side: rows_as_of(spark, side, column[side], v, days).persist() for side, v in source.side_versions.items()
        },
    )


def reconciled_within(pipeline: Pipeline, change: Change) -> dict[str, Reconcile]:
    """table -> its reconciliation, for each table of `change` whose upstream the change stages on every one of its
    days: the upstream's measures are then computed in the same pass as the upstream's own checks, over the rows the
    table reads, rather than in a pass of their own."""
    found = {}
    for name in change.tables():
        rec = pipeline.by_name[name].reconcile
        if rec and rec.upstream in change.days and set(change.days[name]) <= set(change.days[rec.upstream]):
            found[name] = rec
    return found


def _verify(
    built: Staged,
    table: Declared,
    days: list[date],
    downstream: dict[str, Reconcile],
    upstream: Future[checks.Verified] | None,
) -> checks.Verified:
    """The table's blocking checks; the measures of the tables reconciling with it (`downstream`) computed with them,
    its upstream's measures taken from the upstream's checks when those computed them (`upstream`, submitted first)."""
    measures = upstream.result().for_downstream[table.name] if upstream is not None else None
    upstream_rows = checks.Upstream(built.upstream, built.upstream_day, measures)
    return checks.evaluate_blocking(built.table, table, days, upstream_rows, built.lost, downstream)


def _commit_and_record(
    spark: SparkSession,
    pipeline: Pipeline,
    staged: dict[str, Staged],
    change: Change,
    run: RunInfo,
    verified: dict[str, checks.Verified],
    holds: list[control.HeldDay],
    previous_content: dict[tuple[str, date], audit.DayContent],
    started: datetime,
    t0: float,
    pool: ThreadPoolExecutor,
    together: bool,
) -> Iterator[tuple[str, Publication]]:
    """Commit the tables, yielding each one's publication in the graph's order as soon as it is committed; then the
    change's effects on held days and the audit trail (one append).

    `together` (`at_once`): every table is committed at once, else one after another in the graph's order. After a
    failed commit no other commit starts; those already under way end, and every table committed is named
    (PartlyPublished)."""
    held_at = datetime.now(UTC)
    held = _held_days(change, run, held_at)
    commits: dict[str, Commit] = {}
    audit_rows: list[audit.AuditRow] = []
    left_stale = _left_stale(spark, pipeline, change, verified, previous_content)
    wm = control.read_watermark(spark, pipeline.name) if change.operation in _FROM_THE_LANDING else None
    if wm is not None and any(left_stale.values()):  # intent first: recorded even if a commit below fails
        every = _merged(wm.pending, *left_stale.values())
        wm = replace(wm, pending=every)
        control.write_watermark(spark, pipeline.name, wm, run.run_id, datetime.now(UTC))
    fault_point("before-commits")
    tables = change.tables()
    committing = (
        {table: pool.submit(_commit, pipeline, staged, change, run, table) for table in tables} if together else {}
    )
    failure: Exception | None = None
    try:
        for table in tables:
            if failure is not None and table not in committing:
                break
            try:
                if table not in committing:
                    committing[table] = pool.submit(_commit, pipeline, staged, change, run, table)
                commits.update(committing[table].result())
            except Exception as e:
                failure = failure or e
                for pending in committing.values():
                    pending.cancel()  # not started yet: it never will
                continue
            publication, rows = _record(
                spark,
                pipeline,
                staged,
                change,
                run,
                verified[table],
                commits,
                table,
                previous_content,
                held,
                started,
                t0,
            )
            audit_rows += rows
            yield table, replace(publication, left_stale={t: sorted(d) for t, d in left_stale.get(table, {}).items()})
        if failure is not None:
            raise failure
        if wm is not None and _overlap(wm.pending, change.days):  # built now from what is published: no longer stale
            rest = {t: [d for d in days if d not in change.days.get(t, [])] for t, days in wm.pending.items()}
            wm = replace(wm, pending={t: days for t, days in rest.items() if days})
            control.write_watermark(spark, pipeline.name, wm, run.run_id, datetime.now(UTC))
        _hold_or_release(spark, pipeline, change, run, holds, held_at)
        audit.append(spark, pipeline.name, audit_rows)
    except Exception as e:
        for table, pending in committing.items():  # those under way end before the failure says what is committed
            if table not in commits and not pending.cancel() and pending.exception() is None:
                commits.update(pending.result())
        if commits:
            raise PartlyPublished(pipeline, change, commits, e) from e
        raise


# The operations whose rows are built from the landing and what is published: the days they change leave the days
# built from them, outside the change, stale. (A restatement carries its change through every table itself; a
# promotion's plan diffs every day built from the days it changes; a rollback's days are held.)
_FROM_THE_LANDING = (Operation.BACKFILL, Operation.RELEASE)


def _left_stale(
    spark: SparkSession,
    pipeline: Pipeline,
    change: Change,
    verified: dict[str, checks.Verified],
    previous_content: dict[tuple[str, date], audit.DayContent],
) -> dict[str, dict[str, set[date]]]:
    """Per table of the change: the published days of the tables built from it that its changed days leave stale
    outside the change (a trailing window's later days, say). A day whose content changed is one whose fingerprint
    did, or one that had no rows and has some now."""
    if change.operation not in _FROM_THE_LANDING:
        return {}
    found: dict[str, dict[str, set[date]]] = {}
    for table in change.tables():
        changed = []
        for day in change.days[table]:
            now, before = verified[table].profile(day).content, previous_content.get((table, day))
            if checks.fingerprint_changed(now, before) or (now.rows > 0 and (before is None or not before.rows)):
                changed.append(day)
        stale = dependencies.left_stale(pipeline, {table: changed}, change.days, last_day()) if changed else {}
        if stale:
            found[table] = stale
    if found:  # only the days published: a day never written is built when it is
        published = audit.built_by(spark, pipeline.name)
        found = {
            table: {t: kept for t, days in stale.items() if (kept := days & set(published.get(t, {})))}
            for table, stale in found.items()
        }
    return {table: stale for table, stale in found.items() if stale}


def carried_through(
    spark: SparkSession, pipeline: Pipeline, changed: dict[str, list[date]], written: dict[str, list[date]]
) -> dict[str, list[date]]:
    """Table -> the published days beyond `written` that a rollback or a release rebuilds in the same change, since
    they are built from its `changed` days through a day dependency (a trailing window's later days, say), leaving out
    days held since a rollback."""
    published = audit.built_by(spark, pipeline.name)
    held = {h.day for h in control.open_holds(spark, pipeline.name)}
    return dependencies.carried_beyond(pipeline, changed, written, last_day(), published, held)


def carried_days(carried: dict[str, list[date]]) -> str:
    """The days a change rebuilds beyond its range, as a line says them."""
    tables = ", ".join(f"{t} on {day_ranges(days)}" for t, days in carried.items())
    return f"{tables} (built from its days through a day dependency)"


def with_carried(change: Change, carried: dict[str, list[date]]) -> Change:
    """`change` also writing the days `carried` names."""
    tables = [*change.days, *(t for t in carried if t not in change.days)]
    days = {t: sorted(set(change.days.get(t, [])) | set(carried.get(t, []))) for t in tables}
    return replace(change, days=days)


def _merged(pending: dict[str, list[date]], *more: dict[str, set[date]]) -> dict[str, list[date]]:
    merged = {t: set(days) for t, days in pending.items()}
    for stale in more:
        for t, days in stale.items():
            merged.setdefault(t, set()).update(days)
    return {t: sorted(days) for t, days in merged.items()}


def _overlap(pending: dict[str, list[date]], days: dict[str, list[date]]) -> bool:
    return any(set(pending_days) & set(days.get(t, [])) for t, pending_days in pending.items())


def at_once(change: Change) -> bool:
    """Whether the change checks and commits its tables at once: when each has a few days (`narrowed`), its checks and
    commits cost mostly Spark's and Delta's own steps (scheduling, the log's replay, a version's files), which wait on
    each other less side by side; many days' are work on rows, which would share the same cores. Every table's rows
    are staged and checked before the first commit, so no commit needs another's."""
    return all(narrowed(change.days[table]) for table in change.tables())


def _commit(
    pipeline: Pipeline, staged: dict[str, Staged], change: Change, run: RunInfo, table: str
) -> dict[str, Commit]:
    """The table's commit, its side tables' just before it (rows accepted and rows quarantined are two halves of one
    build)."""
    days, source = change.days[table], change.source(table)
    commits: dict[str, Commit] = {}
    info = {
        "pipeline": pipeline.name,
        "code_version": built_by(pipeline, table, source),
        "run_id": run.run_id,
        "backfill_id": run.backfill_id,
        "operation": change.operation.value,
        "days": len(days),
        "first": days[0],
        "last": days[-1],
        **change.note,
    }
    for side, side_df in staged[table].side_tables.items():
        if isinstance(source, Restored):
            info_side = {**info, "asset": side, "restored_version": source.side_versions[side]}
        else:
            side_df = side_df.withColumn("run_id", F.lit(run.run_id))  # which run put the row there
            info_side = {**info, "asset": side}
        commits[side] = overwrite_days(side_df, side, pipeline.day_column[side], days, info_side)
    restored = {"restored_version": source.version} if isinstance(source, Restored) else {}
    commits[table] = overwrite_days(
        staged[table].table, table, pipeline.day_column[table], days, {**info, "asset": table, **restored}
    )
    fault_point(f"commit:{table}")
    return commits


def _source_watermark(table: Declared, df: DataFrame) -> datetime | None:
    """The newest load time among the rows published, for the staging table of an events source (its rows carry it)."""
    if not (isinstance(table, Staging) and table.events):
        return None
    seconds = scalar(df.agg(F.max(table.source.loaded_at).cast("double")))
    return datetime.fromtimestamp(seconds, tz=UTC) if seconds is not None else None


def _held_days(change: Change, run: RunInfo, now: datetime) -> dict[date, control.HeldDay]:
    """The days held once the change is committed: a rollback's (it holds the days it restores)."""
    if not change.hold:
        return {}
    hold = change.hold
    return {d: control.HeldDay(d, hold.why, hold.batches, now, run.run_id) for d in hold.days or change.every_day()}


def _hold_or_release(
    spark: SparkSession,
    pipeline: Pipeline,
    change: Change,
    run: RunInfo,
    holds: list[control.HeldDay],
    held_at: datetime,
) -> None:
    """The declared effect on held days, once every table is committed: a rollback holds its days (as of `held_at`,
    the time its tables' check results give), a release releases them."""
    if change.hold:
        hold = change.hold
        days = list(hold.days) or change.every_day()
        control.hold_days(spark, pipeline.name, days, hold.why, hold.batches, run.run_id, held_at)
    elif change.operation is Operation.RELEASE and holds:
        control.release_holds(spark, pipeline.name, [h.day for h in holds], run.run_id, datetime.now(UTC))


def _late_data(
    spark: SparkSession,
    pipeline: Pipeline,
    table: str,
    days: list[date],
    source: RowSource,
    run: RunInfo,
    now: datetime,
) -> list[checks.Outcome]:
    """late_data_outside_window on each day of a table that publishes late rows: it passes unless the day holds late
    rows older than the restatement window that are still unpublished. A build from every batch that can hold the
    days publishes them, so it settles their exceptions; a restatement's build (from the batches it read) or a
    restored version leaves an open one open."""
    still_open = control.open_exceptions(spark, pipeline.name, days, table)
    settles = isinstance(source, Rebuilt)
    if settles and still_open:
        control.resolve_exceptions(spark, pipeline.name, table, [e.day for e in still_open], run.run_id, now)
    by_day = {e.day: e for e in still_open}
    outcomes = []
    for day in days:
        e = by_day.get(day)
        resolved_by = run.run_id if settles else None
        outcomes.append(
            checks.late_data.written(day, e.rows, e.batches, resolved_by) if e else checks.late_data.none_late(day)
        )
    return outcomes


def _freshness(table: Declared, days: list[date], held: dict[date, control.HeldDay]) -> list[checks.Outcome]:
    """Just written: up to date with the landing, or, on a day held since a rollback, left out as the operator wants
    it (what landed for it is not published until it is released)."""
    outcomes = []
    for day in days:
        if day in held:
            outcomes.append(checks.up_to_date.held(day, held[day].describe()))
            if checks.checks_nothing_lost(table):
                outcomes.append(checks.nothing_lost.held(day, held[day].describe()))
        else:
            outcomes.append(checks.up_to_date.up_to_date(day))
    return outcomes


def _code(pipeline: Pipeline, table: str, days: list[date], source: RowSource) -> list[checks.Outcome]:
    """Just written: by the code loaded now, unless the rows are restored ones an older version built."""
    current = code_versions.current(pipeline)[table]
    outcomes = []
    for day in days:
        outcomes.append(checks.code.written(day, table, built_by(pipeline, table, source, day), current))
    return outcomes


def _record(
    spark: SparkSession,
    pipeline: Pipeline,
    staged: dict[str, Staged],
    change: Change,
    run: RunInfo,
    checked: checks.Verified,
    commits: dict[str, Commit],
    table: str,
    previous_content: dict[tuple[str, date], audit.DayContent],
    held: dict[date, control.HeldDay],
    started: datetime,
    t0: float,
) -> tuple[Publication, list[audit.AuditRow]]:
    """A committed table's publication (every check result and each day's figures for Dagster) and audit rows."""
    ended = datetime.now(UTC)
    days, spec, commit, source = change.days[table], pipeline.by_name[table], commits[table], change.source(table)
    previous = {day: previous_content[(table, day)] for day in days if (table, day) in previous_content}
    outcomes = [
        *checked.outcomes,
        *checks.evaluate_after_commit(checked, previous, days),
        *_freshness(spec, days, held),
        *_code(pipeline, table, days, source),
    ]
    if checks.publishes_late_rows(spec):
        outcomes += _late_data(spark, pipeline, table, days, source, run, ended)
    source_watermark = _source_watermark(spec, staged[table].table)
    changed = {day: checks.fingerprint_changed(checked.profile(day).content, previous.get(day)) for day in days}
    audit_rows = [
        audit.AuditRow(
            run_id=run.run_id,
            backfill_id=run.backfill_id,
            operation=change.operation.value,
            asset=table,
            partition=day,
            rows_written=checked.profile(day).rows,
            fingerprint=checked.profile(day).fingerprint,
            delta_version=commit.version,
            started_at=started,
            ended_at=ended,
            source_watermark=source_watermark,
            duplicate_per_1k=checked.profile(day).duplicate_per_1k,
            mismatch_count=checked.mismatches.get(day, 0) if spec.reconcile else None,
            code_version=built_by(pipeline, table, source, day),
        )
        for day in days
    ]

    def why(day: date) -> dict[str, Any]:
        """A restored day says what it was restored to; a day rebuilt beyond the range, what it was built from."""
        if not (isinstance(source, Restored) and change.hold):
            return {}
        if source.restores(day):
            return {"restored_to_version": source.version, "why": change.hold.why}
        return {"why": f"rebuilt from the days restored upstream ({change.hold.why})"}

    metadata = {s.name: commit_metadata(commits[s.name], days) for s in spec.side_tables if s.name in commits}
    side_outcomes = {
        s.name: checks.quarantine_outcomes(staged[table].side_tables[s.name], s.day_column, days)
        for s in spec.side_tables
        if s.name in commits
    }
    totals = {s.name: commit_totals(commits[s.name], days) for s in spec.side_tables if s.name in commits}
    metadata[table] = {
        day: {
            **day_metadata,
            **why(day),
            CODE_VERSION: built_by(pipeline, table, source, day) or "",
            "fingerprint": checked.profile(day).fingerprint or "",
            "fingerprint_changed": changed[day],
            "duplicate_per_1k": checked.profile(day).duplicate_per_1k,
            **({"mismatch_count": checked.mismatches.get(day, 0)} if spec.reconcile else {}),
            # The change's reads: what building these days scanned of the landing and of published tables.
            **(
                {"scanned": {scan.source: scan.metadata() for scan in staged[table].scans}}
                if staged[table].scans
                else {}
            ),
        }
        for day, day_metadata in commit_metadata(commit, days).items()
    }
    totals[table] = {
        **commit_totals(commit, days),
        "partitions_changed": sum(changed.values()),
        **({"watermark_lag_s": round((ended - source_watermark).total_seconds(), 1)} if source_watermark else {}),
    }
    published_s = round(time.monotonic() - t0, 3)  # from the change's start until this table was committed
    for table_totals in totals.values():
        table_totals["run_publish_s"] = published_s
    return Publication(days, outcomes, metadata, totals, side_outcomes=side_outcomes), audit_rows


def commit_metadata(commit: Commit, days: list[date]) -> dict[date, dict[str, Any]]:
    """Each day's figures of one commit (rows and files as Delta's log records them per partition)."""
    version = commit.version if commit.version is not None else -1
    written_with = day_ranges(days)  # the change's days, which each day was written with
    return {
        day: {
            "rows_written": commit.by_day.get(day.isoformat(), {}).get("rows_written", 0),
            "files_added": commit.by_day.get(day.isoformat(), {}).get("files_added", 0),
            "files_removed": commit.by_day.get(day.isoformat(), {}).get("files_removed", 0),
            "delta_version": version,
            "written_with_days": written_with,
            # A commit found in the log though its call failed: what the call said.
            **({"commit_call_failed": commit.call_failed} if commit.call_failed else {}),
        }
        for day in days
    }


def commit_totals(commit: Commit, days: list[date]) -> dict[str, Any]:
    return {
        "rows_written": commit.rows_written,
        "delta_version": commit.version if commit.version is not None else -1,
        "files_added": commit.files_added,
        "files_removed": commit.files_removed,
        "partitions": len(days),
    }
