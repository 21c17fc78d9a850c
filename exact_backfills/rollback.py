"""Rollback of a range across the graph, as a Dagster run.

A rollback is a change like any other, through the one write path (publish.py): days of tables read as of an earlier
Delta version, and the same days of every table derived from them and not restored rebuilt from what is restored,
the whole graph verified before the first commit (one commit per table; other days' files untouched), so the graph
stays consistent and `check` passes. Given a run (or a
command-line backfill), it restores every table that run wrote, each to its version just before the run's first
commit in it: the whole chunk, not one table of it. Given a table, only that table and the tables it is built from
or builds (written by the run).

The days rolled back are then held (control.held_days): no restatement, sensor tick or backfill re-applies what was
undone until the operator releases them (`release`, which publishes them again from the landing) or takes the batch
out of the landing (`withdraw`). Dagster records the rollback as a run: a materialization of each restored day,
saying what it was restored to, and every check evaluated on it."""

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any

from dagster import Config, Failure, JobDefinition, OpExecutionContext, Out, Output, in_process_executor, job, op
from dagster_pyspark import LazyPySparkResource
from pydantic import Field
from pyspark.sql import SparkSession

from exact_backfills import landing, liveness, recording, retention
from exact_backfills.checks import day_contents_of
from exact_backfills.dagster_names import LAKE_WRITES_POOL, PIPELINE_TAG, ROLLBACK_JOB, ROLLBACK_OP
from exact_backfills.declare import BATCH_COLUMN, Pipeline, SourceKind
from exact_backfills.operations import check_version
from exact_backfills.partitions import days as day_range
from exact_backfills.publish import (
    Change,
    Hold,
    Operation,
    PartlyPublished,
    Publication,
    Refused,
    Restored,
    RowSource,
    RunInfo,
    carried_days,
    carried_through,
    day_ranges,
    publish,
    rows_as_of,
    with_carried,
)
from resources.audit import DayContent
from resources.delta_io import history, read_days, table_exists
from resources.lake import table_path
from resources.settings import settings
from resources.spark import session_of, spark_resource


def version_before(
    spark: SparkSession, table: str, run_id: str | None = None, backfill_id: str | None = None
) -> int | None:
    """The table's version just before the first commit written by `run_id` (or by any run of `backfill_id`), found
    in the commits' userMetadata; None when it wrote nothing in the table."""
    if not table_exists(table):
        return None
    ours = sorted(
        h.version
        for h in history(spark, table_path(table))
        if h.userMetadata
        and (
            (run_id and json.loads(h.userMetadata).get("run_id") == run_id)
            or (backfill_id and json.loads(h.userMetadata).get("backfill_id") == backfill_id)
        )
    )
    return ours[0] - 1 if ours else None


@dataclass
class RollbackPlan:
    start: date
    end: date
    restore: dict[str, int]  # table (or side table) -> the version its days are restored to (-1: before it existed)
    rebuild: list[str]  # derived from a restored table, not restored: rebuilt from it
    why: str
    # What was asked: the run plans again from it (the versions are found again, so a rerun finishes the same one).
    table: str | None = None
    version: int | None = None
    before_run: str | None = None
    before_backfill: str | None = None
    # Table -> its published days beyond the range built from the range's days through a day dependency (a trailing
    # window's later days, say): rebuilt in the same change, so that nothing is left built from the rows undone.
    carried: dict[str, list[date]] = field(default_factory=dict)

    @property
    def days(self) -> list[date]:
        return day_range(self.start, self.end)

    def describe(self) -> str:
        restored = ", ".join(f"{t} to version {v}" for t, v in self.restore.items())
        rebuilt = f"; rebuild {', '.join(self.rebuild)} from them" if self.rebuild else ""
        beyond = f"; beyond the range, rebuild {carried_days(self.carried)}" if self.carried else ""
        return f"{self.start}..{self.end}: restore {restored}{rebuilt}{beyond} ({self.why})"

    def change(self, pipeline: Pipeline, batches: str, built_by: dict[str, str | None] | None = None) -> Change:
        """The change publish makes: every restored table read as of its version (its side tables as of theirs),
        every table derived from one rebuilt, all on the plan's days, which are then held."""
        tables = [t for t in pipeline.publish_order if t in self.restore or t in self.rebuild]
        sources: dict[str, RowSource] = {
            t: Restored(
                self.restore[t],
                {s: v for s, v in self.restore.items() if pipeline.side_table_of.get(s) == t},
                (built_by or {}).get(t),
                frozenset(self.days),
            )
            for t in tables
            if t in self.restore
        }
        change = Change(
            Operation.ROLLBACK, {t: self.days for t in tables}, sources, Hold(self.why, batches, tuple(self.days))
        )
        return with_carried(change, self.carried)


def rollback_plan(
    pipeline: Pipeline, start: date, end: date, written: dict[str, int], asked: str, table: str | None = None
) -> RollbackPlan:
    """What a rollback of what was written (`written`: table or side table -> its version before the write) restores
    and rebuilds: every table written, or, with `table`, that table, the tables it is built from and the tables built
    from it; every table derived from a restored one and not restored itself is rebuilt. ValueError when nothing is
    left to restore."""
    if table:
        if table not in pipeline.by_name:
            raise ValueError(_not_a_table(pipeline, table))
        if table not in written:
            raise ValueError(f"{asked} committed nothing in {table}")
        related = {table, *pipeline.downstream({table}), *pipeline.upstream_of(table)}
        allowed = set(pipeline.with_side_tables([t for t in pipeline.publish_order if t in related]))
        written = {t: v for t, v in written.items() if t in allowed}
    if not written:
        raise ValueError(f"{asked} committed nothing in any table")
    return _plan(pipeline, start, end, written, f"rolled back to before {asked}")


def _not_a_table(pipeline: Pipeline, name: str) -> str:
    if name in pipeline.side_table_of:
        owner = pipeline.side_table_of[name]
        return f"{name} is written with {owner}, from the same build: it is restored with {owner}, never alone"
    return f"unknown table {name!r}; one of: {', '.join(pipeline.publish_order)}"


def _plan(pipeline: Pipeline, start: date, end: date, restore: dict[str, int], why: str, **asked: Any) -> RollbackPlan:
    side_table_of = pipeline.side_table_of
    alone = [s for s in restore if s in side_table_of and side_table_of[s] not in restore]
    if alone:  # a side table is restored with its table, never alone
        raise ValueError(_not_a_table(pipeline, alone[0]))
    unknown = [t for t in restore if t not in pipeline.every_table]
    if unknown:
        raise ValueError(_not_a_table(pipeline, unknown[0]))
    rebuild = [t for t in pipeline.downstream({t for t in restore if t in pipeline.by_name}) if t not in restore]
    order = [t for t in pipeline.every_table if t in restore]
    return RollbackPlan(start, end, {t: restore[t] for t in order}, rebuild, why, **asked)


@dataclass(frozen=True)
class RollbackRequest:
    """What a rollback is asked: a range, and either a run or backfill (everything it wrote, narrowed with `table` to
    that table and the tables it is built from or builds) or a table and a Delta version."""

    start: date
    end: date
    table: str | None = None
    version: int | None = None
    before_run: str | None = None
    before_backfill: str | None = None


def plan_rollback(spark: SparkSession, pipeline: Pipeline, asked: RollbackRequest) -> RollbackPlan:
    """What a rollback of start..end restores, to which versions, and what it rebuilds. ValueError when there is
    nothing to roll back (the run wrote none of the tables, a version outside the table's history)."""
    start, end, table, version = asked.start, asked.end, asked.table, asked.version
    named = {name: getattr(asked, name) for name in ("table", "version", "before_run", "before_backfill")}
    if asked.before_run or asked.before_backfill:
        what = f"run {asked.before_run}" if asked.before_run else f"backfill {asked.before_backfill}"
        written = {
            t: v
            for t in pipeline.every_table
            if (v := version_before(spark, t, asked.before_run, asked.before_backfill)) is not None
        }
        plan = rollback_plan(pipeline, start, end, written, what, table)
        return _with_carried(spark, pipeline, _within_horizon(spark, RollbackPlan(**{**plan.__dict__, **named})))
    if table is None or version is None:
        raise ValueError("give a table and a version, or a run (--before-run) or backfill (--before-backfill)")
    if version < 0:  # -1 stands for "before the table existed" inside a plan, never for what is asked
        raise ValueError(f"version {version} is not a Delta version: give 0 or above")
    if table not in pipeline.every_table:
        raise ValueError(_not_a_table(pipeline, table))
    check_version(spark, table, version)
    plan = _plan(pipeline, start, end, {table: version}, f"{table} rolled back to version {version}", **named)
    return _with_carried(spark, pipeline, _within_horizon(spark, plan))


def _within_horizon(spark: SparkSession, plan: RollbackPlan) -> RollbackPlan:
    """The plan, unless a version it restores reaches past the rollback horizon (ValueError, one line)."""
    for table, version in plan.restore.items():
        retention.refuse_beyond_horizon(spark, table, version)
    return plan


def _with_carried(spark: SparkSession, pipeline: Pipeline, plan: RollbackPlan) -> RollbackPlan:
    """The plan with the days beyond its range that the days it changes reach through a day dependency: the restored
    days whose rows differ from what is published, and the days built from them."""
    changing: dict[str, list[date]] = {}
    for day in preview(spark, pipeline, plan):
        if day.changes and day.table in pipeline.by_name:  # a side table's change is its table's too
            changing.setdefault(day.table, []).append(day.day)
    written = {t: plan.days for t in pipeline.publish_order if t in plan.restore or t in plan.rebuild}
    return replace(plan, carried=carried_through(spark, pipeline, changing, written))


@dataclass(frozen=True)
class DayPreview:
    """A day of a restored table, now and after the rollback."""

    table: str
    day: date
    version: int
    now: DayContent
    after: DayContent

    @property
    def changes(self) -> bool:
        return self.now != self.after


def preview(spark: SparkSession, pipeline: Pipeline, plan: RollbackPlan) -> list[DayPreview]:
    """Per restored table and day: rows and fingerprint now and after the rollback, in one Spark job. Writes
    nothing."""
    sides = {}
    for table, version in plan.restore.items():
        column = pipeline.day_columns[table]
        sides[table, "now"] = (read_days(spark, table, column, plan.days), column)
        sides[table, "after"] = (rows_as_of(spark, table, column, version, plan.days), column)
    found, none = day_contents_of(sides), DayContent(0, None)
    return [
        DayPreview(table, day, version, found[table, "now"].get(day, none), found[table, "after"].get(day, none))
        for table, version in plan.restore.items()
        for day in plan.days
    ]


def landed_batches(spark: SparkSession, pipeline: Pipeline, days: list[date]) -> str:
    """The landed batches of the events sources with rows on `days` (what a release would apply again)."""
    found: set[str] = set()
    for source in pipeline.sources:
        if source.kind is SourceKind.EVENTS and landing.batch_dirs(source):
            on_days = landing.event_day(source, pipeline.partitions).between(min(days), max(days))
            rows = landing.read_landing(spark, source).where(on_days)
            found |= {str(r[0]) for r in rows.select(BATCH_COLUMN).distinct().collect() if r[0] is not None}
    return ", ".join(sorted(found))


def code_version_at(spark: SparkSession, table: str, version: int) -> str | None:
    """The code version of the newest commit up to `version` that names one: the code that wrote the table then."""
    if version < 0:
        return None
    for commit in history(spark, table_path(table)):  # newest first
        metadata = json.loads(commit.userMetadata) if commit.version <= version and commit.userMetadata else {}
        if metadata.get("code_version"):
            return str(metadata["code_version"])
    return None


def roll_back(spark: SparkSession, pipeline: Pipeline, plan: RollbackPlan, run: RunInfo) -> dict[str, Publication]:
    """Restore, rebuild, hold, through the one write path: every table's days verified before the first commit
    (Refused, nothing written, when a restored table would no longer match the tables it is built from), one commit
    per table, the days held once committed. A restored day is recorded as built by the code that wrote it then."""
    built_by = {t: code_version_at(spark, t, v) for t, v in plan.restore.items()}
    return publish(spark, pipeline, plan.change(pipeline, landed_batches(spark, pipeline, plan.days), built_by), run)


def summary(plan: RollbackPlan) -> dict[str, Any]:
    carried = {t: day_ranges(days) for t, days in plan.carried.items()}
    return {
        "days": day_ranges(plan.days),
        "restored": plan.restore,
        "rebuilt": plan.rebuild,
        "rebuilt_beyond_the_range": carried,
        "why": plan.why,
    }


class RollbackConfig(Config):
    """What to roll back: a range, and either a run or backfill (everything it wrote, narrowed to one table and the
    tables it is built from or builds with `table`) or a table and a Delta version."""

    start: str = Field(description="first day, YYYY-MM-DD")
    end: str = Field(description="last day, YYYY-MM-DD (inclusive)")
    before_run: str = Field(default="", description="restore what was there before this run wrote it")
    before_backfill: str = Field(default="", description="restore what was there before this backfill wrote it")
    table: str = Field(default="", description="only this table and the tables it is built from or builds")
    version: int | None = Field(
        default=None, description="with `table`: the Delta version to restore it to (0 or above)"
    )


def rollback_job(pipeline: Pipeline) -> JobDefinition:
    """The rollback of a range across the pipeline's graph, as a Dagster job: launchable from the UI with typed
    config, and what `rollback` runs."""

    @op(name=ROLLBACK_OP, out=Out(dict), pool=LAKE_WRITES_POOL)
    def roll_back_days_op(
        context: OpExecutionContext, config: RollbackConfig, pyspark: LazyPySparkResource
    ) -> Iterator[Any]:
        """Restore the days, rebuild what is derived from them, hold them; Dagster records each restored day (what it
        was restored to) and every check evaluated on what the tables now hold."""
        liveness.record(context, pipeline)
        spark = session_of(pyspark)
        try:
            asked = RollbackRequest(
                date.fromisoformat(config.start),
                date.fromisoformat(config.end),
                config.table or None,
                config.version,
                config.before_run or None,
                config.before_backfill or None,
            )
            plan = plan_rollback(spark, pipeline, asked)
        except ValueError as error:
            raise recording.refusal(str(error)) from None
        context.log.info(f"rollback: {plan.describe()}")
        try:
            publications = roll_back(spark, pipeline, plan, RunInfo.of(context.run))
        except PartlyPublished as error:
            raise Failure(description=str(error)) from error.cause
        except Refused as error:
            raise recording.refusal(str(error)) from None
        for table, publication in publications.items():
            yield from recording.publication_events(context, table, publication)
        yield Output(summary(plan))

    # A rollback rewrites a few days: a short run, its JVM set for that (resources.spark).
    @job(
        name=ROLLBACK_JOB,
        executor_def=in_process_executor,
        resource_defs={"pyspark": spark_resource(settings(), short_runs=True)},
        tags={PIPELINE_TAG: pipeline.name},
        description="Roll back a range across the graph: restore, rebuild what is derived, hold the days (see "
        "`rollback`).",
    )
    def rollback_days() -> None:
        roll_back_days_op()

    return rollback_days
