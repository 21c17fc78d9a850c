"""Recording: as each table is committed, its check results and each day's figures for Dagster (fingerprints,
row-count changes; a table that publishes late rows settles their exceptions), handed to the caller at once; and its
audit rows, appended in one once every table is committed."""

import time
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from typing import Any

from dagster import TableColumn, TableSchema
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from exact_backfills import checks, clock, code_versions, deadlines
from exact_backfills.declare import Declared, Pipeline, Staging
from exact_backfills.write_path.changes import (
    CODE_VERSION,
    Change,
    Publication,
    Rebuilt,
    Restored,
    RowSource,
    built_by,
    day_ranges,
)
from exact_backfills.write_path.context import Writing
from resources import audit, control
from resources.delta_io import Commit, scalar

# Dagster's metadata key for a materialization's columns, which its UI shows as the asset's schema (the newest's).
COLUMN_SCHEMA = "dagster/column_schema"


def record(w: Writing, table: str) -> Publication:
    """A committed table's publication, with the days it leaves stale; its audit rows kept for the one append."""
    publication, rows = _record(w, table, clock.now())
    w.audit_rows += rows
    return replace(publication, left_stale={t: sorted(d) for t, d in w.left_stale.get(table, {}).items()})


def _record(w: Writing, table: str, ended: datetime) -> tuple[Publication, list[audit.AuditRow]]:
    """A committed table's publication (every check result and each day's figures for Dagster) and audit rows."""
    pipeline, staged, change, held = w.pipeline, w.staged, w.change, w.held
    checked, commits = w.verified[table], w.commits
    days, spec, source = change.days[table], pipeline.by_name[table], change.source(table)
    previous = {day: w.previous_content[(table, day)] for day in days if (table, day) in w.previous_content}
    source_watermark = _source_watermark(spec, staged[table].table)
    outcomes = [
        *checked.outcomes,
        *checks.evaluate_after_commit(checked, previous, days),
        *_up_to_date(spec, days, held),
        *_code(pipeline, table, days, source),
        *deadlines.outcomes(w.spark, pipeline, table, days, ended, source_watermark),
    ]
    if checks.publishes_late_rows(spec):
        outcomes += _late_data(w, table, days, source, ended)
    changed = {day: checks.fingerprint_changed(checked.profile(day).content, previous.get(day)) for day in days}
    committed = _Committed(w, table, changed, source_watermark, ended)
    audit_rows = _audit_rows(committed)
    metadata = _metadata(committed)
    side_outcomes = {
        s.name: checks.quarantine_outcomes(staged[table].side_tables[s.name], s.day_column, days)
        for s in spec.side_tables
        if s.name in commits
    }
    totals = _totals(committed)
    return Publication(days, outcomes, metadata, totals, side_outcomes=side_outcomes), audit_rows


@dataclass(frozen=True)
class _Committed:
    """A table just committed, as its figures are recorded: which days' content changed, the newest load time among
    its rows (an events source's staging), and when its recording began."""

    w: Writing
    table: str
    changed: dict[date, bool]
    source_watermark: datetime | None
    ended: datetime


def _audit_rows(c: _Committed) -> list[audit.AuditRow]:
    w, table = c.w, c.table
    checked, spec, source, days = (
        w.verified[table],
        w.pipeline.by_name[table],
        w.change.source(table),
        w.change.days[table],
    )
    return [
        audit.AuditRow(
            run_id=w.run.run_id,
            backfill_id=w.run.backfill_id,
            operation=w.change.operation.value,
            asset=table,
            partition=day,
            rows_written=checked.profile(day).rows,
            fingerprint=checked.profile(day).fingerprint,
            delta_version=w.commits[table].version,
            started_at=w.started.at,
            ended_at=c.ended,
            source_watermark=c.source_watermark,
            duplicate_per_1k=checked.profile(day).duplicate_per_1k,
            mismatch_count=checked.mismatches.get(day, 0) if spec.reconcile else None,
            code_version=built_by(w.pipeline, table, source, day),
        )
        for day in days
    ]


def _why(change: Change, source: RowSource, day: date) -> dict[str, Any]:
    """A restored day says what it was restored to; a day rebuilt beyond the range, what it was built from."""
    if not (isinstance(source, Restored) and change.hold):
        return {}
    if source.restores(day):
        return {"restored_to_version": source.version, "why": change.hold.why}
    return {"why": f"rebuilt from the days restored upstream ({change.hold.why})"}


def _metadata(c: _Committed) -> dict[str, dict[date, dict[str, Any]]]:
    """Each day's figures of the table and of its side tables."""
    w, table = c.w, c.table
    pipeline, change, commits, checked, staged = w.pipeline, w.change, w.commits, w.verified[table], w.staged[table]
    days, spec, source = change.days[table], pipeline.by_name[table], change.source(table)
    metadata = {s.name: commit_metadata(commits[s.name], days) for s in spec.side_tables if s.name in commits}
    metadata[table] = {
        day: {
            **day_metadata,
            **_why(change, source, day),
            CODE_VERSION: built_by(pipeline, table, source, day) or "",
            "fingerprint": checked.profile(day).fingerprint or "",
            "fingerprint_changed": c.changed[day],
            "duplicate_per_1k": checked.profile(day).duplicate_per_1k,
            **({"mismatch_count": checked.mismatches.get(day, 0)} if spec.reconcile else {}),
            # The change's reads: what building these days scanned of the landing and of published tables.
            **({"scanned": {scan.source: scan.metadata() for scan in staged.scans}} if staged.scans else {}),
        }
        for day, day_metadata in commit_metadata(commits[table], days).items()
    }
    return metadata


def _totals(c: _Committed) -> dict[str, dict[str, Any]]:
    """The run's figures of the table and of its side tables, timed from the change's start until this commit."""
    w, table = c.w, c.table
    commits, days, spec = w.commits, w.change.days[table], w.pipeline.by_name[table]
    totals = {s.name: commit_totals(commits[s.name], days) for s in spec.side_tables if s.name in commits}
    lag = {"watermark_lag_s": round((c.ended - c.source_watermark).total_seconds(), 1)} if c.source_watermark else {}
    totals[table] = {**commit_totals(commits[table], days), "partitions_changed": sum(c.changed.values()), **lag}
    published_s = round(
        time.monotonic() - w.started.monotonic, 3
    )  # from the change's start until this table was committed
    for table_totals in totals.values():
        table_totals["run_publish_s"] = published_s
    return totals


def _source_watermark(table: Declared, df: DataFrame) -> datetime | None:
    """The newest load time among the rows published, for the staging table of an events source (its rows carry it)."""
    if not (isinstance(table, Staging) and table.events):
        return None
    seconds = scalar(df.agg(F.max(table.source.loaded_at).cast("double")))
    return datetime.fromtimestamp(seconds, tz=UTC) if seconds is not None else None


def _late_data(w: Writing, table: str, days: list[date], source: RowSource, now: datetime) -> list[checks.Outcome]:
    """late_data_outside_window on each day of a table that publishes late rows: it passes unless the day holds late
    rows older than the restatement window that are still unpublished. A build from every batch that can hold the
    days publishes them, so it settles their exceptions; a restatement's build (from the batches it read) or a
    restored version leaves an open one open."""
    spark, pipeline, run = w.spark, w.pipeline, w.run
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


def _up_to_date(table: Declared, days: list[date], held: dict[date, control.HeldDay]) -> list[checks.Outcome]:
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
            # The day's columns, as Dagster's UI shows an asset's schema (recording keeps them on the newest day only).
            **({COLUMN_SCHEMA: TableSchema([TableColumn(n, t) for n, t in commit.columns])} if commit.columns else {}),
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
