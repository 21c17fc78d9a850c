"""Rollback of a range across the graph, as a Dagster run.

A rollback restores days of tables to an earlier Delta version with the same replaceWhere primitive as every write
(one commit per table; other days' files untouched), then rebuilds, from what it restored, the same days of every
table derived from them and not restored, so the graph stays consistent and `check` passes. Given a run (or a
command-line backfill), it restores every table that run wrote, each to its version just before the run's first
commit in it: the whole chunk, not one table of it. Given a table, only that table and the tables it is built from
or builds (written by the run).

The days rolled back are then held (control.held_days): no restatement, sensor tick or backfill re-applies what was
undone until the operator releases them (`release`, which publishes them again from the landing) or takes the batch
out of the landing (`withdraw`). Dagster records the rollback as a run: a materialization of each restored day,
saying what it was restored to, and every check evaluated on it."""

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timezone

from dagster import Config, Failure, OpExecutionContext, Out, Output, in_process_executor, job, op
from dagster_pyspark import LazyPySparkResource
from pydantic import Field
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from assets_pkg import checks, landing, liveness, recording
from assets_pkg.assets import LAKE_WRITES_POOL
from assets_pkg.operations import check_version, profile
from assets_pkg.partitions import days as day_range
from assets_pkg.publish import Publication, RunInfo, commit_metadata, day_ranges, publish, verify_published
from assets_pkg.tables import BY_NAME, DAY_COLUMN, PUBLISH_ORDER, downstream
from resources import audit, control
from resources.delta_io import Commit, history, overwrite_days, read_days, table_exists
from resources.lake import table_path
from resources.settings import settings
from resources.spark import spark_resource

ROLLBACK_JOB = "rollback_days"
ROLLBACK_OP = "roll_back_days"


def version_before(spark: SparkSession, table: str, run_id: str | None = None, backfill_id: str | None = None) -> int | None:
    """The table's version just before the first commit written by `run_id` (or by any run of `backfill_id`), found
    in the commits' userMetadata; None when it wrote nothing in the table."""
    if not table_exists(spark, table):
        return None
    ours = sorted(
        h.version for h in history(spark, table_path(table))
        if h.userMetadata and (
            (run_id and json.loads(h.userMetadata).get("run_id") == run_id)
            or (backfill_id and json.loads(h.userMetadata).get("backfill_id") == backfill_id))
    )
    return ours[0] - 1 if ours else None


def _with_side_tables(tables: list[str]) -> list[str]:
    """Every table and its side tables, in publish order, a side table just before its table (as publish commits)."""
    return [name for t in tables for name in [*BY_NAME[t].side_tables, t]]


def _upstream(table: str) -> set[str]:
    found, stack = set(), [table]
    while stack:
        for up in BY_NAME[stack.pop()].upstream:
            if up in BY_NAME and up not in found:
                found.add(up)
                stack.append(up)
    return found


@dataclass
class RollbackPlan:
    start: date
    end: date
    restore: dict[str, int]  # table -> the version its days are restored to (-1: before it existed), commit order
    rebuild: list[str]  # derived from a restored table, not restored: rebuilt from it
    why: str
    # What was asked: the run plans again from it (the versions are found again, so a rerun finishes the same one).
    table: str | None = None
    version: int | None = None
    before_run: str | None = None
    before_backfill: str | None = None

    @property
    def days(self) -> list[date]:
        return day_range(self.start, self.end)

    def describe(self) -> str:
        restored = ", ".join(f"{t} to version {v}" for t, v in self.restore.items())
        rebuilt = f"; rebuild {', '.join(self.rebuild)} from them" if self.rebuild else ""
        return f"{self.start}..{self.end}: restore {restored}{rebuilt} ({self.why})"


def plan_rollback(spark: SparkSession, start: date, end: date, table: str | None = None, version: int | None = None,
                  before_run: str | None = None, before_backfill: str | None = None) -> RollbackPlan:
    """What a rollback of start..end restores, to which versions, and what it rebuilds. ValueError when there is
    nothing to roll back (the run wrote none of the tables, a version outside the table's history)."""
    if before_run or before_backfill:
        what = f"run {before_run}" if before_run else f"backfill {before_backfill}"
        candidates = _with_side_tables(PUBLISH_ORDER)
        wrote = {t: v for t in candidates if (v := version_before(spark, t, before_run, before_backfill)) is not None}
        if table:
            if table not in wrote:
                raise ValueError(f"{what} committed nothing in {table}")
            related = {table, *downstream({table}), *_upstream(table)}
            wrote = {t: v for t, v in wrote.items() if t in _with_side_tables([r for r in PUBLISH_ORDER if r in related])}
        if not wrote:
            raise ValueError(f"{what} committed nothing in any table")
        restore, why = wrote, f"rolled back to before {what}"
    else:
        if table is None or version is None:
            raise ValueError("give a table and a version, or a run (--before-run) or backfill (--before-backfill)")
        if version >= 0:
            check_version(spark, table, version)
        restore, why = {table: version}, f"{table} rolled back to version {version}"
    restored_tables = {t for t in restore if t in BY_NAME}
    rebuild = [t for t in downstream(restored_tables) if t not in restore]
    order = [t for t in _with_side_tables(PUBLISH_ORDER) if t in restore]
    return RollbackPlan(start, end, {t: restore[t] for t in order}, rebuild, why, table, version, before_run, before_backfill)


def _rows_at(spark: SparkSession, table: str, version: int, days: list[date]) -> DataFrame:
    """The table's rows of `days` as of `version` (none before the table existed)."""
    if version < 0:
        return read_days(spark, table, DAY_COLUMN[table], days).where(F.lit(False))
    old = spark.read.format("delta").option("versionAsOf", version).load(table_path(table))
    return old.where(F.col(DAY_COLUMN[table]).between(F.lit(min(days)), F.lit(max(days))))


def preview(spark: SparkSession, plan: RollbackPlan) -> list[dict]:
    """Per restored table and day: rows and fingerprint now and after the rollback. Writes nothing."""
    found = []
    for table, version in plan.restore.items():
        now = profile(read_days(spark, table, DAY_COLUMN[table], plan.days), table)
        after = profile(_rows_at(spark, table, version, plan.days), table)
        for day in plan.days:
            (rows_now, fp_now), (rows_after, fp_after) = now.get(day, (0, None)), after.get(day, (0, None))
            found.append({"table": table, "day": day.isoformat(), "version": version, "rows_now": rows_now,
                          "rows_after": rows_after, "fingerprint_now": fp_now, "fingerprint_after": fp_after,
                          "changes": fp_now != fp_after})
    return found


class PartlyRolledBack(RuntimeError):
    def __init__(self, plan: RollbackPlan, restored: list[str], cause: BaseException):
        left = [t for t in plan.restore if t not in restored]
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        super().__init__(
            f"rollback of {plan.start}..{plan.end} failed after restoring {', '.join(restored)}; not restored: "
            f"{', '.join(left) or 'none'}; not rebuilt: {', '.join(plan.rebuild) or 'none'} ({first}). Run the same "
            "rollback again to finish it: restoring a day to the same version again changes nothing."
        )


class RollbackRefused(RuntimeError):
    """The restored days would not pass a blocking check (a table no longer matching the tables it is built from):
    nothing was restored."""


def _verify_restored(spark: SparkSession, plan: RollbackPlan, after: dict[str, DataFrame]) -> None:
    """Reconcile before restoring: every restored table's blocking checks on the rows it would hold (`after`), against
    its upstream table as it will be (restored too, or as published). Raises RollbackRefused before anything is
    written. Nothing lost is not among them: the days are held, their landed rows left out on purpose."""
    failing = []
    for table in [t for t in plan.restore if t in BY_NAME]:
        tc = BY_NAME[table].checks
        rec = tc.reconciliation
        if rec and rec.upstream in plan.rebuild:  # rebuilt from restored tables, after this one: checked by its build
            rec = None
        upstream = None
        if rec:
            upstream = after.get(rec.upstream)
            if upstream is None:
                upstream = read_days(spark, rec.upstream, DAY_COLUMN[rec.upstream], plan.days)
        outcomes, _ = checks.evaluate_blocking(after[table], upstream, None, dataclasses.replace(tc, reconciliation=rec), plan.days)
        failing += [f"{o.check} of {table} on {o.day}: {checks.summary(o)}" for o in outcomes if not o.passed]
    if failing:
        raise RollbackRefused(
            f"rollback of {plan.start}..{plan.end} refused, nothing restored: the restored days would fail "
            + "; ".join(failing[:5]) + (f"; and {len(failing) - 5} more" if len(failing) > 5 else "")
            + ". Roll back the tables it is built from too (--before-run RUN restores everything a run wrote)."
        )


def _landed_batches(spark: SparkSession, days: list[date]) -> str:
    """The landed order item batches with rows on `days` (what a release would apply again)."""
    rows = landing.read_landing(spark, landing.ORDER_ITEMS).where(F.col("order_date").between(min(days), max(days)))
    return ", ".join(sorted(str(r[0]) for r in rows.select("ingest_date").distinct().collect() if r[0] is not None))


def roll_back(spark: SparkSession, plan: RollbackPlan, run: RunInfo) -> Iterator[tuple[str, Publication]]:
    """Verify, restore, hold, rebuild (see the module's docstring). Yields each table's publication: the restored
    tables' days with their checks evaluated on what they now hold, then the rebuilt tables'. Raises RollbackRefused,
    having written nothing, when a restored table would fail a blocking check."""
    started = datetime.now(timezone.utc)
    # Each table's rows as restored, read once for the checks and the write.
    after = {t: _rows_at(spark, t, v, plan.days).persist() for t, v in plan.restore.items()}
    commits: dict[str, tuple[Commit, dict]] = {}
    try:
        _verify_restored(spark, plan, after)
        for table, version in plan.restore.items():
            restored = profile(after[table], table)
            info = {"run_id": run.run_id, "operation": "rollback", "restored_version": version, "asset": table,
                    "first": plan.start, "last": plan.end}
            commits[table] = (overwrite_days(after[table], table, DAY_COLUMN[table], plan.days, info), restored)
        control.hold_days(spark, plan.days, plan.why, _landed_batches(spark, plan.days), run.run_id, datetime.now(timezone.utc))
        rebuilt = publish(spark, {t: plan.days for t in plan.rebuild}, run, held="keep") if plan.rebuild else {}
    except Exception as e:
        if commits:
            raise PartlyRolledBack(plan, list(commits), e) from e
        raise
    finally:
        for rows in after.values():
            rows.unpersist()
    ended = datetime.now(timezone.utc)
    audit.append(spark, [
        audit.AuditRow(run_id=run.run_id, backfill_id=None, operation="rollback", asset=table, partition=day,
                       rows_written=restored.get(day, (0, None))[0], fingerprint=restored.get(day, (0, None))[1],
                       delta_version=commit.version, started_at=started, ended_at=ended)
        for table, (commit, restored) in commits.items() for day in plan.days
    ])
    for table in [t for t in plan.restore if t in BY_NAME]:
        metadata = {}
        for name in [*BY_NAME[table].side_tables, table]:
            if name in commits:
                commit, restored = commits[name]
                metadata[name] = {
                    day: {**figures, "restored_to_version": plan.restore[name], "why": plan.why,
                          "fingerprint": restored.get(day, (0, ""))[1] or ""}
                    for day, figures in commit_metadata(commit, plan.days).items()
                }
        yield table, Publication(plan.days, verify_published(spark, table, plan.days, run), metadata)
    yield from rebuilt.items()


def summary(plan: RollbackPlan) -> dict:
    return {"days": day_ranges(plan.days), "restored": plan.restore, "rebuilt": plan.rebuild, "why": plan.why}


class RollbackConfig(Config):
    """What to roll back: a range, and either a run or backfill (everything it wrote, narrowed to one table and the
    tables it is built from or builds with `table`) or a table and a Delta version."""

    start: str = Field(description="first day, YYYY-MM-DD")
    end: str = Field(description="last day, YYYY-MM-DD (inclusive)")
    before_run: str = Field(default="", description="restore what was there before this run wrote it")
    before_backfill: str = Field(default="", description="restore what was there before this backfill wrote it")
    table: str = Field(default="", description="only this table and the tables it is built from or builds")
    version: int | None = Field(default=None, description="with `table`: the Delta version to restore it to")


@op(name=ROLLBACK_OP, out=Out(dict), pool=LAKE_WRITES_POOL)
def roll_back_days_op(context: OpExecutionContext, config: RollbackConfig, pyspark: LazyPySparkResource):
    """Restore the days, hold them, rebuild what is derived from them; Dagster records each restored day (what it was
    restored to) and every check evaluated on what the tables now hold."""
    liveness.record(context)
    spark = pyspark.spark_session
    try:
        plan = plan_rollback(spark, date.fromisoformat(config.start), date.fromisoformat(config.end), config.table or None,
                             config.version, config.before_run or None, config.before_backfill or None)
    except ValueError as error:
        raise Failure(description=str(error)) from None
    context.log.info(f"rollback: {plan.describe()}")
    try:
        for table, publication in roll_back(spark, plan, RunInfo.of(context.run)):
            yield from recording.publication_events(context, table, publication)
    except PartlyRolledBack as error:
        raise Failure(description=str(error)) from error.__cause__
    except RollbackRefused as error:
        raise Failure(description=str(error)) from None
    yield Output(summary(plan))


# A rollback rewrites a few days: a short run, its JVM set for that (resources.spark).
@job(name=ROLLBACK_JOB, executor_def=in_process_executor, resource_defs={"pyspark": spark_resource(settings(), short_runs=True)},
     description="Roll back a range across the graph: restore, hold the days, rebuild what is derived (see `rollback`).")
def rollback_job():
    roll_back_days_op()
