"""Promoting a plan: exactly its changed days written from its shadow tables through the one write path, its
unchanged days recorded as current under the new code; refused, in one line and with nothing written, when the plan
no longer holds (closed, failing a blocking check, built with other code, or a table moved since it was pinned)."""

import json
from dataclasses import dataclass
from datetime import date

from pyspark.sql import SparkSession

from exact_backfills import clock, code_versions
from exact_backfills.declare import Pipeline
from exact_backfills.plans import Plan, PlanRefused, load_plan
from exact_backfills.publish import Change, FromPlan, Operation, Publication, RunInfo, publish
from resources import audit, control, storage
from resources.delta_io import current_version, history
from resources.lake import plans_root, table_path


def refusal(spark: SparkSession, pipeline: Pipeline, plan: Plan, status: str) -> str | None:
    """Why the plan cannot be promoted now, in one line (None: it can)."""
    if status != "open":
        return f"plan {plan.plan_id} is {status}: plan again"
    if plan.blocking_failures:
        f = plan.blocking_failures[0]
        return (
            f"plan {plan.plan_id} failed {len(plan.blocking_failures)} blocking check(s) in its shadow tables, e.g. "
            f"{f.check} of {f.table} on {f.day}: {f.summary}; fix the code and plan again"
        )
    if plan.refusals:
        return f"plan {plan.plan_id} cannot be promoted: {plan.refusals[0]}"
    now = code_versions.current(pipeline)
    moved_code = [t for t in plan.code_versions if now.get(t) != plan.code_versions[t]]
    if moved_code:
        t = moved_code[0]
        return (
            f"plan {plan.plan_id} was built with code {plan.code_versions[t]} of {t}, the code loaded now is "
            f"{now.get(t)}: plan again"
        )
    for table, pinned in plan.pinned.items():
        version = current_version(spark, table)
        if version != pinned:
            return (
                f"{table} moved since plan {plan.plan_id} pinned it (version {pinned} → {version}, written by "
                f"{written_since(spark, table, pinned)}): plan again"
            )
    return None


def written_since(spark: SparkSession, table: str, pinned: int | None) -> str:
    """Who wrote `table`'s commits after version `pinned`, as their userMetadata names them: each operation (a
    promotion with its plan) and its run, oldest first."""
    writers: list[str] = []
    for commit in reversed(history(spark, table_path(table))):
        if pinned is not None and commit.version <= pinned:
            continue
        info = json.loads(commit.userMetadata) if commit.userMetadata else {}
        what = str(info.get("operation") or "a write outside the pipeline")
        if info.get("plan_id"):
            what += f" of plan {info['plan_id']}"
        writer = f"{what} in run {info['run_id']}" if info.get("run_id") else what
        if writer not in writers:
            writers.append(writer)
    return ", ".join(writers) or "nothing the log names"


@dataclass
class Promotion:
    plan: Plan
    publications: dict[str, Publication]  # the changed days, written
    unchanged: dict[str, list[date]]  # the days recorded as current under the new code, not rewritten


def promote(spark: SparkSession, pipeline: Pipeline, plan_id: str, run: RunInfo) -> Promotion:
    """Write exactly the plan's changed days from its shadow tables, through publish, and record its unchanged days
    as current under the new code. PlanRefused (nothing written) when it cannot be promoted."""
    plan, status = load_plan(spark, pipeline, plan_id)
    why = refusal(spark, pipeline, plan, status)
    if why:
        raise PlanRefused(why)
    changed = {t: p.changed_days for t, p in plan.tables.items() if p.changed_days}
    note = {
        "plan_id": plan.plan_id,
        "code_versions_before": {t: p.code_before for t, p in plan.tables.items()},
        "code_versions_after": {t: p.code_after for t, p in plan.tables.items()},
    }
    change = Change(Operation.PROMOTION, changed, {t: FromPlan(plan.plan_id) for t in changed}, note=note)
    publications = publish(spark, pipeline, change, run) if changed else {}
    now = clock.now()
    unchanged = {t: p.unchanged_days for t, p in plan.tables.items() if p.unchanged_days}
    every_day = sorted({d for days in unchanged.values() for d in days})
    written = audit.latest_before_run(spark, pipeline.name, run.run_id, every_day)
    audit.append(
        spark,
        pipeline.name,
        [
            audit.AuditRow(
                run_id=run.run_id,
                backfill_id=None,
                operation=Operation.PROMOTION.value,
                asset=table,
                partition=day,
                rows_written=written[(table, day)].rows if (table, day) in written else 0,
                fingerprint=written[(table, day)].fingerprint if (table, day) in written else None,
                delta_version=None,
                started_at=now,
                ended_at=now,
                code_version=plan.code_versions[table],
            )
            for table, days in unchanged.items()
            for day in days
        ],
    )
    control.resolve_plan(spark, pipeline.name, plan.plan_id, "promoted", run.run_id, now)
    storage.delete_tree(storage.join(plans_root(), plan.plan_id))
    return Promotion(plan, publications, unchanged)


def drop(spark: SparkSession, pipeline: Pipeline, plan_id: str, run_id: str) -> None:
    """Remove a plan: its shadow tables deleted, its record closed."""
    plan, status = load_plan(spark, pipeline, plan_id)
    if status == "open":
        control.resolve_plan(spark, pipeline.name, plan.plan_id, "dropped", run_id, clock.now())
    storage.delete_tree(storage.join(plans_root(), plan.plan_id))
