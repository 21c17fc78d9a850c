"""The one write path: every change to published days goes through `publish`, whatever asked for it (a backfill's run,
a restatement, a rollback, a release of held days).

A change is a plan of (table -> days) and, for each table, where its rows come from (`RowSource`): built from the
landing and its upstream tables, built by the table's restatement build from the batches just read, or read as of an
earlier Delta version. `publish` takes it through these stages, the whole graph at each stage, over one `Writing`
(exact_backfills/write_path/, a module per stage):
- stage (staging.py): every table's days built (or read), in the graph's order, and held; a table reads its upstream
  tables' days from what this change stages for them, and any other day from what is published;
- verify (verify.py): every blocking check of every table on every day. One failing day and nothing at all is written
  (reconcile before publish, across the graph): `Refused`;
- intent (intent.py): for a backfill or a release, the days built from the days it changes that it does not write
  itself (a trailing window's later days, say) are recorded as pending in the watermark, for the next restatement;
- commit (commit.py): replace exactly the days (`overwrite_days`, the one call site of the package), one Delta commit
  per table, a side table just before its table: all at once for a change of a few days (`at_once`), else in the
  graph's order;
- record (record.py): as each table is committed, its check results and each day's figures for Dagster
  (fingerprints, row-count changes; a table that publishes late rows settles their exceptions), handed to the caller
  at once (`publishing`); once every table is committed, the effects the change declares (a rollback holds its days,
  a release releases them) and the audit trail (one append).

A failure during the commits or after them raises PartlyPublished, which says which tables were committed for which
days; the days are then repaired by running the same change again (see automation.late_data_sensor)."""

from collections.abc import Iterator
from dataclasses import replace

from pyspark.sql import SparkSession

from exact_backfills import clock
from exact_backfills.declare import Pipeline
from exact_backfills.pipelines import command
from exact_backfills.write_path.changes import (
    CODE_VERSION,
    Change,
    FromPlan,
    Hold,
    Operation,
    PartlyPublished,
    Publication,
    Rebuilt,
    Refused,
    Renamed,
    Restated,
    Restored,
    RowSource,
    RunInfo,
    built_by,
    day_ranges,
    operation_of,
)
from exact_backfills.write_path.commit import (
    KILL_AT,
    ahead,
    commits,
    fault_point,
    held_days,
    hold_or_release,
    under_way,
)
from exact_backfills.write_path.context import Started, Writing, at_once, threads
from exact_backfills.write_path.intent import carried_days, carried_through, intend, settle_pending, with_carried
from exact_backfills.write_path.record import COLUMN_SCHEMA, commit_metadata, commit_totals, record
from exact_backfills.write_path.staging import cached, checkpointed, rows_as_of, stage
from exact_backfills.write_path.verify import check, reconciled_within, verify
from resources import audit, control

# Where callers name the write path's vocabulary and its parts.
__all__ = [
    "CODE_VERSION",
    "COLUMN_SCHEMA",
    "KILL_AT",
    "Change",
    "FromPlan",
    "Hold",
    "Operation",
    "PartlyPublished",
    "Publication",
    "Rebuilt",
    "Refused",
    "Renamed",
    "Restated",
    "Restored",
    "RowSource",
    "RunInfo",
    "at_once",
    "built_by",
    "carried_days",
    "carried_through",
    "checkpointed",
    "commit_metadata",
    "commit_totals",
    "day_ranges",
    "fault_point",
    "cached",
    "operation_of",
    "publish",
    "publishing",
    "reconciled_within",
    "rows_as_of",
    "with_carried",
]


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
    started = Started.now()
    change = _in_publish_order(pipeline, change)
    holds = _holds(spark, pipeline, change)
    together = at_once(change, pipeline.partitions)
    w = Writing(spark, pipeline, change, run, started, holds, together, threads(pipeline, change, together))
    try:
        # What each day held before this run, read while the tables are built (this run's own rows are left out).
        w.reading_previous = w.pool.submit(
            audit.latest_before_run, spark, pipeline.name, run.run_id, change.every_day()
        )
        w.reconciled = {} if together else reconciled_within(pipeline, change)
        for table in change.tables():
            stage(w, table)
            if together:  # its rows are computed (a few days' are checkpointed): checked while the next builds
                check(w, table)
        if not together:  # checked once every table is built, in the graph's order
            for table in change.tables():
                check(w, table)
        verify(w)
        yield from ahead(lambda: _commit_and_record(w))
    finally:
        w.close()


def _commit_and_record(w: Writing) -> Iterator[tuple[str, Publication]]:
    """The intent, then the commits, yielding each table's publication in the graph's order as soon as it is
    committed; then the change's effects on held days and the audit trail (one append). After a failed commit no other
    commit starts; those already under way end, and every table committed is named (PartlyPublished)."""
    assert w.reading_previous is not None
    w.previous_content = w.reading_previous.result()
    w.held_at = clock.now()
    w.held = held_days(w.change, w.run, w.held_at)
    intend(w)
    fault_point("before-commits")
    try:
        for table in commits(w):
            yield table, record(w, table)
        settle_pending(w)
        hold_or_release(w)
        audit.append(w.spark, w.pipeline.name, w.audit_rows)
    except Exception as e:
        under_way(w)
        if w.commits:
            raise PartlyPublished(w.pipeline, w.change, w.commits, e) from e
        raise


def _in_publish_order(pipeline: Pipeline, change: Change) -> Change:
    """The change, each table's days once and in order, its tables in the graph's order; a table the pipeline does
    not declare refused."""
    unknown = [t for t in change.tables() if t not in pipeline.by_name]
    if unknown:
        raise ValueError(f"not tables of pipeline {pipeline.name}: {', '.join(unknown)}")
    return replace(change, days={t: sorted(set(change.days[t])) for t in pipeline.publish_order if change.days.get(t)})


def _holds(spark: SparkSession, pipeline: Pipeline, change: Change) -> list[control.HeldDay]:
    """The change's days held since a rollback; Refused if it is not one that may write them (a rollback, a
    release)."""
    holds = control.open_holds(spark, pipeline.name, change.every_day()) if change.every_day() else []
    if holds and change.operation in (Operation.BACKFILL, Operation.RESTATEMENT, Operation.PROMOTION):
        raise Refused(change, holds=holds, release=f"{command(pipeline)} release")
    return holds
