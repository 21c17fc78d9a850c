"""The commands of a code change: plan it beside the lake, show a plan, promote it."""

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from exact_backfills.cli.table import Command, range_args, run_failed

if TYPE_CHECKING:
    from exact_backfills.declare import Pipeline
    from exact_backfills.plans import Plan


def _plan(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills import estimates
    from exact_backfills.backfill import dagster_instance, run_plan
    from exact_backfills.dagster_names import PLAN_OP
    from exact_backfills.pipelines import command
    from exact_backfills.plans import Plan, version_note
    from exact_backfills.promotion import drop
    from resources.spark import get_spark

    if args.drop:
        drop(get_spark(), pipeline, args.drop, "plan --drop")
        print(f"plan {args.drop} dropped: its shadow tables are deleted")
        return 0
    select = args.select.split(",") if args.select else None
    unknown = [t for t in select or [] if t not in pipeline.by_name]
    if unknown:
        raise ValueError(f"unknown table(s) {', '.join(unknown)}; one of: {', '.join(pipeline.publish_order)}")
    start, end = args.start or pipeline.partitions.first_day, args.end or pipeline.partitions.last_day
    instance = dagster_instance()
    tables = pipeline.downstream(set(select)) if select else list(pipeline.publish_order)
    # The session the plan job's run uses (a short run's): started here, for the estimate, as the run would start it.
    estimate = estimates.for_plan(get_spark(short_runs=True), pipeline, instance, start, end, tables)
    said = sys.stderr if args.json else sys.stdout  # with --json, stdout is the plan alone
    for line in estimates.describe("plan", estimate, upper_bound=True):
        print(line, file=said)
    started = time.monotonic()
    result = run_plan(pipeline, start, end, select, instance)
    if not result.success:
        return run_failed("plan", result, file=sys.stderr)
    document = result.output_for_node(PLAN_OP)
    plan = Plan.from_json(document)
    rebuilt = sum(len(t.changed_days) + len(t.unchanged_days) for t in plan.tables.values())
    measured = estimates.Measured(1, rebuilt, time.monotonic() - started)
    print(estimates.describe_measured("plan", estimate, measured), file=said)
    if args.json:
        print(json.dumps({**document, "estimate": estimate.to_json(), "measured": measured._asdict()}, indent=2))
    else:
        print(version_note(plan))
        _print_blocking(plan)
        print(plan_outcome(plan, command(pipeline), result.run_id))
    return 0 if plan.promotable else 1


def _plan_arguments(p: argparse.ArgumentParser) -> None:
    range_args(p)
    p.add_argument("--select", help="comma-separated tables to start from (every table built from them follows)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--drop", metavar="PLAN_ID", help="remove a plan: its shadow tables deleted")


def _print_blocking(plan: "Plan") -> None:
    for failure in plan.blocking_failures:
        print(f"  BLOCKING {failure.check} of {failure.table} on {failure.day}: {failure.summary}")


def _plan_show(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.pipelines import command
    from exact_backfills.plans import load_plan, version_note
    from resources.spark import get_spark

    plan, status = load_plan(get_spark(), pipeline, args.plan_id)
    if args.json:
        print(json.dumps({**plan.to_json(), "status": status}, indent=2))
        return 0
    print(version_note(plan) + f"\n(status: {status})")
    _print_blocking(plan)
    if status == "open" and plan.promotable:
        print(f"promote it with `{command(pipeline)} promote {plan.plan_id}`")
    return 0


def _plan_show_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("plan_id")
    p.add_argument("--json", action="store_true", help="print the plan as JSON, with its status")


def plan_outcome(plan: "Plan", command: str, run_id: str) -> str:
    """The line a plan ends with: what promoting it would do, if anything."""
    if plan.refusals:
        return f"plan {plan.plan_id} cannot be promoted: {plan.refusals[0]}"
    if not plan.promotable:
        return f"plan {plan.plan_id} cannot be promoted: blocking checks failed in its shadow tables"
    if any(t.changed_days for t in plan.tables.values()):
        return f"nothing published changed; promote it with `{command} promote {plan.plan_id}` (run {run_id})"
    if plan.tables:
        return (
            f"no day changes: `{command} promote {plan.plan_id}` records the days it rebuilt as built by the code "
            f"loaded now, rewriting none (run {run_id})"
        )
    return f"nothing to rebuild, nothing to promote: every day was built by the code loaded now (run {run_id})"


def _promote(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.backfill import run_promotion
    from exact_backfills.dagster_names import PROMOTE_OP
    from exact_backfills.pipelines import command

    result = run_promotion(pipeline, args.plan_id)
    if not result.success:
        return run_failed("promote", result, file=sys.stderr)
    print(result.output_for_node(PROMOTE_OP)["note"])
    print(
        f"promoted in run {result.run_id}; `{command(pipeline)} rollback --before-run {result.run_id} --start D1 "
        "--end D2` undoes it"
    )
    return 0


def _plan_id_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("plan_id")


PLAN = Command(
    "plan",
    "plan a code change: rebuild the days older code built beside the lake, compare them day by day with what is "
    "published, publish nothing; exit 1 when a blocking check fails in the plan",
    _plan,
    _plan_arguments,
    actions=(
        Command(
            "show", "a plan already built, as `plan` printed it (its status too)", _plan_show, _plan_show_arguments
        ),
    ),
)
PROMOTE = Command(
    "promote", "promote a plan: exactly its changed days, one commit per table", _promote, _plan_id_argument
)
