"""Committing: exactly the change's days replaced (`overwrite_days`, the one call site of the package), one Delta
commit per table, a side table just before its table: all at once for a change of a few days (`at_once`), else in the
graph's order; on a thread of its own (`ahead`), so that a caller records one table's days while the next is
committed. The fault points the fault-injection tests kill the process at are named here."""

import os
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, datetime
from typing import TypeVar

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from exact_backfills import clock
from exact_backfills.write_path.changes import Change, Operation, Renamed, Restored, RunInfo, built_by
from exact_backfills.write_path.context import Writing
from resources import control
from resources.delta_io import KEY, Commit, overwrite_days

# For the fault-injection tests: EXACT_BACKFILLS_KILL_AT=<point> kills this process with SIGKILL when it reaches that
# point, as an OOM kill or a lost machine would: "before-commits" (built and verified, nothing committed),
# "commit:<table>" (just after that table's commit), "before-watermark" (a restatement's commits done, its watermark
# not yet advanced).
KILL_AT = "EXACT_BACKFILLS_KILL_AT"


def fault_point(name: str) -> None:
    if os.environ.get(KILL_AT) == name:
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class _Failed:
    error: BaseException


_END = object()
T = TypeVar("T")


def ahead(items: Callable[[], Iterator[T]]) -> Iterator[T]:
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


def commits(w: Writing) -> Iterator[str]:
    """Commit the tables, yielding each one in the graph's order as soon as it is committed. After a failed commit no
    other commit starts and the failure is raised once the commits already under way are awaited in order."""
    tables = w.change.tables()
    if w.together:
        w.committing = {table: w.pool.submit(_commit, w, table) for table in tables}
    failure: Exception | None = None
    for table in tables:
        if failure is not None and table not in w.committing:
            break
        try:
            if table not in w.committing:
                w.committing[table] = w.pool.submit(_commit, w, table)
            w.commits.update(w.committing[table].result())
        except Exception as e:
            failure = failure or e
            for pending in w.committing.values():
                pending.cancel()  # not started yet: it never will
            continue
        yield table
    if failure is not None:
        raise failure


def under_way(w: Writing) -> None:
    """After a failure: the commits under way end, each taken in `w.commits`, before the failure says what is
    committed."""
    for table, pending in w.committing.items():
        if table not in w.commits and not pending.cancel() and pending.exception() is None:
            w.commits.update(pending.result())


def side_rows(w: Writing, table: str) -> dict[str, DataFrame]:
    """The table's side tables' rows as committed: each row with the run that put it there (a restored version's
    rows keep theirs)."""
    staged = w.staged[table].side_tables
    if isinstance(w.change.source(table), Restored):
        return dict(staged)
    return {side: rows.withColumn("run_id", F.lit(w.run.run_id)) for side, rows in staged.items()}


def _commit(w: Writing, table: str) -> dict[str, Commit]:
    """The table's commit, its side tables' just before it (rows accepted and rows quarantined are two halves of one
    build)."""
    pipeline, staged, change, run = w.pipeline, w.staged, w.change, w.run
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
    for side, side_df in side_rows(w, table).items():
        restored = {"restored_version": source.side_versions[side]} if isinstance(source, Restored) else {}
        info_side = {**info, "asset": side, **restored}
        commits[side] = overwrite_days(side_df, side, pipeline.day_columns[side], days, info_side)
    provenance: dict[str, object] = {"restored_version": source.version} if isinstance(source, Restored) else {}
    if isinstance(source, Renamed):
        provenance = {"renamed_from": source.former}
    info_table = {**info, "asset": table, KEY: list(pipeline.by_name[table].key), **provenance}
    commits[table] = overwrite_days(staged[table].table, table, pipeline.day_columns[table], days, info_table)
    fault_point(f"commit:{table}")
    return commits


def held_days(change: Change, run: RunInfo, now: datetime) -> dict[date, control.HeldDay]:
    """The days held once the change is committed: a rollback's (it holds the days it restores)."""
    if not change.hold:
        return {}
    hold = change.hold
    return {d: control.HeldDay(d, hold.why, hold.batches, now, run.run_id) for d in hold.days or change.every_day()}


def hold_or_release(w: Writing) -> None:
    """The declared effect on held days, once every table is committed: a rollback holds its days (as of `held_at`,
    the time its tables' check results give), a release releases them."""
    spark, pipeline, change, run, holds = w.spark, w.pipeline, w.change, w.run, w.holds
    if change.hold:
        hold = change.hold
        days = list(hold.days) or change.every_day()
        control.hold_days(spark, pipeline.name, days, hold.why, hold.batches, run.run_id, w.held_at)
    elif change.operation is Operation.RELEASE and holds:
        control.release_holds(spark, pipeline.name, [h.day for h in holds], run.run_id, clock.now())
