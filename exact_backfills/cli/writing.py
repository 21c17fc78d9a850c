"""The commands that write: land demo data (and a pipeline's own landing commands), backfill, withdraw a landed file,
roll back and release."""

import argparse
from typing import TYPE_CHECKING

from exact_backfills.arguments import positive_int, share, version
from exact_backfills.cli.table import (
    Command,
    Handler,
    observe,
    range_args,
    required_range_args,
    run_failed,
    tables,
)

if TYPE_CHECKING:
    from exact_backfills.declare import Pipeline


def _generate(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills import landing
    from exact_backfills.declare import Demo
    from resources.spark import get_spark

    if args.if_empty and any(landing.batch_dirs(source) for source in pipeline.sources):
        print(f"the landing already holds batches of pipeline {pipeline.name}: nothing generated")
        return 0
    if pipeline.generate is None:
        raise ValueError(f"pipeline {pipeline.name} has no demo data generator: land its sources' batches yourself")
    start, end = args.start or pipeline.partitions.first_day, args.end or pipeline.partitions.last_day
    if end < start:
        raise ValueError(f"--end {end} is before --start {start}")
    print(pipeline.generate(get_spark(), Demo(start, end, args.seed, args.rows_per_day, args.bad_rate)))
    return observe(pipeline)


def _generate_arguments(p: argparse.ArgumentParser) -> None:
    range_args(p)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--rows-per-day", type=positive_int, default=200)
    p.add_argument("--bad-rate", type=share, default=0.0, help="share of rows that break the contract (default 0)")
    p.add_argument("--if-empty", action="store_true", help="only when none of the pipeline's sources has a batch yet")


def _pipeline_command(name: str) -> Handler:
    def run(pipeline: "Pipeline", args: argparse.Namespace) -> int:
        from resources.spark import get_spark

        found = next(c for c in pipeline.commands if c.name == name)
        print(found.run(get_spark(), args))
        return observe(pipeline)

    return run


def pipeline_commands(pipeline: "Pipeline | None") -> list[Command]:
    """The selected pipeline's own commands, each observing the landing after it lands."""
    return (
        [Command(c.name, c.help, _pipeline_command(c.name), c.arguments) for c in pipeline.commands] if pipeline else []
    )


def _backfill(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.backfill import BackfillRequest, run_backfill

    request = BackfillRequest(
        pipeline,
        args.start or pipeline.partitions.first_day,
        args.end or pipeline.partitions.last_day,
        select=args.select.split(",") if args.select else None,
        chunk_size=args.max_partitions_per_run,
        dry_run=args.dry_run,
    )
    return run_backfill(request).exit_code


def _backfill_arguments(p: argparse.ArgumentParser) -> None:
    range_args(p)
    p.add_argument("--select", help="comma-separated asset names (default: all)")
    p.add_argument(
        "--max-partitions-per-run",
        type=positive_int,
        default=None,
        help="days per run (default: BACKFILL_MAX_PARTITIONS_PER_RUN)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the runs, tables and days it would write, what it would read and how long it should take; stop",
    )


def _withdraw(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.backfill import BackfillRequest, run_backfill
    from exact_backfills.dagster_names import WITHDRAWN_TAG
    from exact_backfills.operations import published_again, withdraw
    from resources.delta_io import day_runs
    from resources.spark import get_spark

    done = withdraw(get_spark(), pipeline, args.file, args.reason)
    print(f"withdrew {done.source}/{done.file} to {done.moved_to} (why: {done.note})")
    if done.days:
        print(f"publishing again {len(done.days)} day(s) its rows are or could be on")
        tags = {WITHDRAWN_TAG: f"{done.source}/{done.file}"}
        backfills = [run_backfill(BackfillRequest(pipeline, a, b, tags=tags)) for a, b in day_runs(done.days)]
        if not all(backfills):
            print("the withdrawal is not finished: run the same withdraw again to publish its days")
            return 2 if any(b.refused for b in backfills) else 1
    else:
        print("no published day holds its rows: nothing to publish again")
    published_again(done)
    return 0


def _withdraw_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--file", required=True, help="the file, as `check` names it: <source>/ingest_date=D/<name>")
    p.add_argument("--reason", required=True, help="why it is withdrawn, kept beside the file")


def _rollback(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.backfill import run_rollback
    from exact_backfills.pipelines import command
    from exact_backfills.rollback import RollbackRequest, plan_rollback, preview
    from resources.spark import get_spark

    if args.asset:
        tables(pipeline, args)
    if args.version is not None and not args.asset:
        raise ValueError("--version needs --asset: a version is one table's")
    spark = get_spark()
    asked = RollbackRequest(args.start, args.end, args.asset, args.version, args.before_run, args.before_backfill)
    plan = plan_rollback(spark, pipeline, asked)
    print(f"rollback {plan.describe()}")
    if args.dry_run:
        days = preview(spark, pipeline, plan)
        for d in days:
            print(
                f"  {d.table} {d.day}: {d.now.rows} rows ({(d.now.fingerprint or '-')[:12]}) -> "
                f"{d.after.rows} rows ({(d.after.fingerprint or '-')[:12]})" + ("" if d.changes else " unchanged")
            )
        print(f"dry run: nothing written ({sum(d.changes for d in days)} table-day(s) would change)")
        return 0
    result = run_rollback(pipeline, plan)
    if not result.success:
        return run_failed("rollback", result)
    print(
        f"rolled back in run {result.run_id}; the days are held: restatements leave them as they are until "
        f"`{command(pipeline)} release --start {args.start} --end {args.end}` publishes them again from the landing"
    )
    return 0


def _rollback_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--asset",
        help="only this table and the tables it is built from or builds (with --version: it alone, "
        "the tables derived from it rebuilt)",
    )
    required_range_args(p)
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--version", type=version, help="with --asset: the Delta version to restore its range to")
    to.add_argument("--before-run", help="restore what every table held before this Dagster run wrote it")
    to.add_argument("--before-backfill", help="restore what every table held before this backfill wrote it")
    p.add_argument("--dry-run", action="store_true", help="print what would be restored, per table and day, and stop")


def _release(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.backfill import BackfillRequest, run_backfill
    from exact_backfills.dagster_names import RELEASE_TAG
    from exact_backfills.partitions import days
    from exact_backfills.publish import carried_days, carried_through
    from resources.spark import get_spark

    released = days(args.start, args.end)
    every_table = {t: released for t in pipeline.publish_order}
    carried = carried_through(get_spark(), pipeline, every_table, every_table)
    if carried:
        print(f"release {args.start}..{args.end}: beyond its days, also rebuilds {carried_days(carried)}")
    return run_backfill(BackfillRequest(pipeline, args.start, args.end, tags={RELEASE_TAG: "true"})).exit_code


def _vacuum(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.backfill import run_vacuum
    from exact_backfills.dagster_names import VACUUM_OP

    result = run_vacuum(pipeline)
    if not result.success:
        return run_failed("vacuum", result)
    for line in result.output_for_node(VACUUM_OP):
        print(line)
    return 0


GENERATE = Command("generate", "land the pipeline's deterministic demo data", _generate, _generate_arguments)
BACKFILL = Command(
    "backfill",
    "materialize a range for the chosen assets and everything downstream",
    _backfill,
    _backfill_arguments,
    within_partitions=True,
)
ROLLBACK = Command(
    "rollback",
    "restore a range across the graph (one commit per table), as a Dagster run; the days are then held until `release`",
    _rollback,
    _rollback_arguments,
    within_partitions=True,
)
RELEASE = Command(
    "release",
    "publish days held since a rollback again from the landing, and release them",
    _release,
    required_range_args,
    within_partitions=True,
)
VACUUM = Command(
    "vacuum",
    "set every table's retention to the rollback horizon (ROLLBACK_HORIZON_DAYS) and remove the files older than it",
    _vacuum,
)
WITHDRAW = Command(
    "withdraw",
    "take a landed file out of the landing (moved aside, with why) and publish again the days it touched",
    _withdraw,
    _withdraw_arguments,
)
