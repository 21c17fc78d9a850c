"""`python -m exact_backfills [--pipeline <module>:<attribute>] <command>` (also installed as `exact-backfills`): every
command works on the pipeline selected (EXACT_BACKFILLS_PIPELINE, else the orders pipeline). `python -m assets_pkg`
is the same command line on the orders pipeline."""

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import date
from typing import TYPE_CHECKING, NoReturn, TextIO

from exact_backfills.arguments import day, positive_int, share, version

if TYPE_CHECKING:
    from dagster import ExecuteInProcessResult

    from exact_backfills.declare import Pipeline
    from exact_backfills.dependencies import CodeChange
    from exact_backfills.late_data import Detection
    from exact_backfills.plans import Plan


class _Parser(argparse.ArgumentParser):
    """A mistyped command is one line: what is wrong (`--help` for the rest), not the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _run_failed(what: str, result: "ExecuteInProcessResult", file: TextIO | None = None) -> int:
    """A failed run's one line per failed step (on stdout unless `file`); exit 2 when the machinery refused it
    (nothing written), else 1."""
    from exact_backfills.backfill import step_failures

    failures = step_failures(result)
    for failure in failures:
        said = f"{what} {'refused' if failure.refused else 'failed'} (run {result.run_id}): {failure.cause}"
        print(said, file=file or sys.stdout)
    return 2 if any(f.refused for f in failures) else 1


def _range_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--start", type=day, default=None, help="first day (default: first partition)")
    p.add_argument("--end", type=day, default=None, help="last day, inclusive (default: last partition)")


def _cmd_generate(pipeline: "Pipeline", args: argparse.Namespace) -> int:
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
    return _observe(pipeline)


def _observe(pipeline: "Pipeline") -> int:
    from exact_backfills.backfill import observe_landing, step_failures

    result = observe_landing(pipeline)
    for failure in step_failures(result):
        print(f"observing the landing failed in {failure.step}: {failure.cause}")
    if result.success:
        print(f"landing observed in Dagster (run {result.run_id})")
    return 0 if result.success else 1


def _pipeline_command(name: str) -> Callable[["Pipeline", argparse.Namespace], int]:
    def run(pipeline: "Pipeline", args: argparse.Namespace) -> int:
        from resources.spark import get_spark

        found = next(c for c in pipeline.commands if c.name == name)
        print(found.run(get_spark(), args))
        return _observe(pipeline)

    return run


def _cmd_backfill(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.backfill import run_backfill

    ok = run_backfill(
        pipeline,
        args.start or pipeline.partitions.first_day,
        args.end or pipeline.partitions.last_day,
        select=args.select.split(",") if args.select else None,
        chunk_size=args.max_partitions_per_run,
        dry_run=args.dry_run,
    )
    return ok.exit_code


def _tables(pipeline: "Pipeline", args: argparse.Namespace) -> list[str]:
    if args.asset and args.asset not in pipeline.publish_order:
        raise ValueError(f"unknown asset {args.asset!r}; one of: {', '.join(pipeline.publish_order)}")
    return [args.asset] if args.asset else list(pipeline.publish_order)


def _tables_and_quarantine(pipeline: "Pipeline", args: argparse.Namespace) -> list[str]:
    """What `check` and `report` look at: the tables asked for (--asset, else every one) with their quarantine, or a
    quarantine table on its own."""
    if args.asset in pipeline.side_table_of:
        return [args.asset]
    return pipeline.with_side_tables(_tables(pipeline, args))


def _checked_range(pipeline: "Pipeline", args: argparse.Namespace) -> None:
    """--start after --end, or a day outside the pipeline's partitions: one line naming both, before anything runs."""
    start, end = getattr(args, "start", None), getattr(args, "end", None)
    if start and end and start > end:
        raise ValueError(f"--start {start} is after --end {end}")
    if args.func in _WITHIN_PARTITIONS:
        calendar = pipeline.partitions
        for flag, value in (("--start", start), ("--end", end)):
            if value and value not in calendar:
                raise ValueError(
                    f"{flag} {value} is outside the partitions {calendar.first_day}..{calendar.last_day} "
                    f"(the calendar of pipeline {pipeline.name}, or PARTITION_START_DATE, PARTITION_END_DATE)"
                )


def _cmd_check(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.backfill import run_checks, step_failures

    start, end = args.start or pipeline.partitions.first_day, args.end or pipeline.partitions.last_day
    tables = _tables_and_quarantine(pipeline, args)
    result, evaluations = run_checks(pipeline, start, end, tables)
    errors = step_failures(result, failed_checks=False)
    for failure in errors:
        print(f"{failure.step} could not be checked: {failure.cause}")
    failed = len(errors)
    for table in tables:
        mine = [e for e in evaluations if e.asset_key.to_user_string() == table]
        bad = sorted((e for e in mine if not e.passed), key=lambda e: (e.partition, e.check_name))
        if not mine:  # "passed" only ever means evaluated and passed
            failed += 1
            print(f"{table}: not checked over {start}..{end} (no check result was recorded)")
            continue
        failed += len(bad)
        print(f"{table}: {len(mine) - len(bad)}/{len(mine)} check results passed over {start}..{end}")
        if table in pipeline.side_table_of:
            print(f"  {_quarantined(mine)}")
        for e in bad:
            print(f"  FAIL {e.check_name} {e.description}")
    print(f"recorded in Dagster as run {result.run_id}")
    failed += _report_refused_files(pipeline)
    return 1 if failed else 0


def _quarantined(evaluations: list) -> str:
    """What a quarantine table's check results say over their days: rows by reason, and refused files."""
    from collections import Counter

    by_reason: Counter[str] = Counter()
    refused = 0
    for e in evaluations:
        for pair in filter(None, str(e.metadata["by_reason"].value).split(", ")):
            reason, _, n = pair.rpartition("=")
            by_reason[reason] += int(n)
        refused += int(e.metadata["refused_file_count"].value)
    if not by_reason:
        return "nothing quarantined"
    reasons = ", ".join(f"{reason} {n}" for reason, n in by_reason.most_common())
    files = f"; {refused} refused file(s)" if refused else ""
    return f"{sum(by_reason.values())} row(s) quarantined by reason: {reasons}{files}"


def _report_refused_files(pipeline: "Pipeline") -> int:
    from exact_backfills import landing
    from exact_backfills.pipelines import command

    refused = [r for source in pipeline.sources for r in landing.refused_files(source)]
    for r in refused:
        print(f"REFUSED {r.describe()}")
    if refused:
        print(
            f"{len(refused)} landed file(s) refused by the landing contract (an events source's files are kept in "
            f"quarantine as one row each); take one out with `{command(pipeline)} withdraw --file <source>/<file> "
            "--reason ...`"
        )
    return len(refused)


def _cmd_withdraw(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.backfill import run_backfill
    from exact_backfills.dagster_names import WITHDRAWN_TAG
    from exact_backfills.operations import published_again, withdraw
    from resources.delta_io import day_runs
    from resources.spark import get_spark

    done = withdraw(get_spark(), pipeline, args.file, args.reason)
    print(f"withdrew {done.source}/{done.file} to {done.moved_to} (why: {done.note})")
    if done.days:
        print(f"publishing again {len(done.days)} day(s) its rows are or could be on")
        tags = {WITHDRAWN_TAG: f"{done.source}/{done.file}"}
        backfills = [run_backfill(pipeline, a, b, tags=tags) for a, b in day_runs(done.days)]
        if not all(backfills):
            print("the withdrawal is not finished: run the same withdraw again to publish its days")
            return 2 if any(b.refused for b in backfills) else 1
            return 1
    else:
        print("no published day holds its rows: nothing to publish again")
    published_again(done)
    return 0


def _cmd_report(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.operations import report
    from resources import storage
    from resources.spark import get_spark

    if args.plan:
        from exact_backfills.plans import load_plan, version_note

        plan, status = load_plan(get_spark(), pipeline, args.plan)
        print(version_note(plan) + f"\n(status: {status})")
        return 0
    start, end = args.start or pipeline.partitions.first_day, args.end or pipeline.partitions.last_day
    against = storage.normalized(args.against) if args.against else None
    mismatches = 0
    compared = against is not None or args.version is not None
    for table in _tables_and_quarantine(pipeline, args):
        print(f"{table}:" + (f" compared with {against or f'version {args.version}'}" if compared else ""))
        for found in report(get_spark(), pipeline, table, start, end, against=against, version=args.version):
            line = f"  {found.day} rows={found.rows:<8} sha256={found.fingerprint or '-'}"
            if found.other is not None:
                line += (
                    "  match"
                    if found.matches
                    else f"  MISMATCH other_rows={found.other.rows} other_sha256={found.other.fingerprint or '-'}"
                )
                mismatches += not found.matches
            print(line)
    if mismatches:
        print(f"{mismatches} mismatching partition(s)")
    return 1 if mismatches else 0


def _cmd_rollback(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.backfill import run_rollback
    from exact_backfills.pipelines import command
    from exact_backfills.rollback import RollbackRequest, plan_rollback, preview
    from resources.spark import get_spark

    if args.asset:
        _tables(pipeline, args)
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
        return _run_failed("rollback", result)
    print(
        f"rolled back in run {result.run_id}; the days are held: restatements leave them as they are until "
        f"`{command(pipeline)} release --start {args.start} --end {args.end}` publishes them again from the landing"
    )
    return 0


def _cmd_release(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.backfill import run_backfill
    from exact_backfills.dagster_names import RELEASE_TAG
    from exact_backfills.partitions import days
    from exact_backfills.publish import carried_days, carried_through
    from resources.spark import get_spark

    released = days(args.start, args.end)
    every_table = {t: released for t in pipeline.publish_order}
    carried = carried_through(get_spark(), pipeline, every_table, every_table)
    if carried:
        print(f"release {args.start}..{args.end}: beyond its days, also rebuilds {carried_days(carried)}")
    return run_backfill(pipeline, args.start, args.end, tags={RELEASE_TAG: "true"}).exit_code


def _cmd_metrics(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.operations import metrics
    from resources.spark import get_spark

    figures = metrics(get_spark(), pipeline)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    lag = "-" if figures["landing_lag_s"] is None else f"{figures['landing_lag_s']:.0f} s"
    print(
        f"landing: newest batch {figures['newest_landed_batch'] or '-'}, "
        f"newest day {figures['newest_landed_day'] or '-'}; "
        f"watermark {figures['watermark'] or '- (never restated)'}; landed data not yet published: {lag}"
    )
    width = max([26, *(len(m["asset"]) + 2 for m in figures["assets"])])
    print(
        f"{'asset':<{width}}{'runs':>6}{'p95 run s':>11}{'dup per 1k':>12}{'mismatches':>12}{'stale days':>12}"
        "  newest day"
    )
    for m in figures["assets"]:
        stale = "-" if m["stale_days"] is None else m["stale_days"]
        print(
            f"{m['asset']:<{width}}{m['runs']:>6}{m['p95_run_s']:>11}{m['duplicate_per_1k'] or 0:>12}"
            f"{m['mismatch_count'] or 0:>12}{stale:>12}  {m['newest_published_day'] or '-'}"
        )
    return 0


def print_detection(pipeline: "Pipeline", detection: "Detection") -> None:
    from exact_backfills.pipelines import command

    before = detection.watermark.watermark_ts or "none yet (no restatement has run: the next reads every batch once)"
    after, window = detection.new_watermark_ts or "-", detection.window_start or "-"
    print(f"watermark: {before} -> {after}; restatement window from {window}")
    for source, batches in detection.batches_read.items():
        print(f"  {source}: {len(batches)} batch(es) read{': ' + ', '.join(batches[-5:]) if batches else ''}")
    for table, days in detection.days_by_table().items():
        if days:
            print(f"{table}: {len(days)} day(s) to restate")
            for found in days:
                print(f"  {found}: {detection.change(table, found).describe()}")
    for table, outside in detection.outside.items():
        for found, change in sorted(outside.items()):
            print(
                f"  OUTSIDE WINDOW {table} {found}: {change.describe()}: not restated automatically; backfill it "
                "by hand"
            )
    for refused in detection.refused:
        print(f"  REFUSED {refused.describe()}: not read (an events source's files are kept in quarantine)")
    for hold in detection.holds:
        landed = detection.held.get(hold.day)
        print(
            f"  HELD {hold.describe()}{': landed since: ' + landed.describe() if landed else ''}; "
            f"`{command(pipeline)} release --start {hold.day} --end {hold.day}` publishes it again, `withdraw` takes a "
            "batch out"
        )


def describe_code_change(table: str, change: "CodeChange") -> str:
    """Why a table's day is stale by code, naming the table once: its own code, or a table it is built from."""
    if change.table == table:
        return f"code changed ({change.built_by or 'unrecorded'} → {change.current})"
    return f"built from {change.table}, whose code changed ({change.built_by or 'unrecorded'} → {change.current})"


def _print_code_changes(stale: "dict[str, dict[date, CodeChange]]") -> None:
    from exact_backfills.publish import day_ranges

    for table, days in stale.items():
        by_change: dict[CodeChange, list[date]] = {}
        for found, change in days.items():
            by_change.setdefault(change, []).append(found)
        for change, changed in by_change.items():
            why = describe_code_change(table, change)
            print(f"{table}: {why} on {len(changed)} day(s): {day_ranges(sorted(changed))}")


def _stale_json(detection: "Detection", stale: "dict[str, dict[date, CodeChange]]") -> dict[str, dict[str, list[str]]]:
    """table -> day -> why it is stale: "landing" (batches landed since), "code" (its code, or an upstream's,
    changed), "late_data_outside_window" (late rows older than the restatement window)."""
    reasons: dict[str, dict[str, list[str]]] = {}

    def add(table: str, found: date, reason: str) -> None:
        reasons.setdefault(table, {}).setdefault(found.isoformat(), []).append(reason)

    for table, days in detection.days_by_table().items():
        for found in days:
            add(table, found, "landing")
    for table, changes in stale.items():
        for found in changes:
            add(table, found, "code")
    for table, outside in detection.outside.items():
        for found in outside:
            add(table, found, "late_data_outside_window")
    return {t: dict(sorted(days.items())) for t, days in reasons.items()}


def _cmd_stale(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.late_data import detect
    from exact_backfills.verification import stale_code_days
    from resources.spark import get_spark

    spark = get_spark()
    detection = detect(spark, pipeline)
    stale = {table: days for table, days in stale_code_days(spark, pipeline).items() if days}
    if args.json:
        print(json.dumps(_stale_json(detection, stale), indent=2))
        return 0
    print_detection(pipeline, detection)
    _print_code_changes(stale)
    if not any(detection.days_by_table().values()) and not detection.outside and not detection.holds and not stale:
        print("nothing is stale")
    return 0


def _cmd_plan(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills import estimates
    from exact_backfills.backfill import dagster_instance, run_plan
    from exact_backfills.dagster_names import PLAN_OP
    from exact_backfills.pipelines import command
    from exact_backfills.plans import Plan, drop, version_note
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
        return _run_failed("plan", result, file=sys.stderr)
    document = result.output_for_node(PLAN_OP)
    plan = Plan.from_json(document)
    rebuilt = sum(len(t.changed_days) + len(t.unchanged_days) for t in plan.tables.values())
    measured = estimates.Measured(1, rebuilt, time.monotonic() - started)
    print(estimates.describe_measured("plan", estimate, measured), file=said)
    if args.json:
        print(json.dumps({**document, "estimate": estimate.to_json(), "measured": measured._asdict()}, indent=2))
    else:
        print(version_note(plan))
        for failure in plan.blocking_failures:
            print(f"  BLOCKING {failure.check} of {failure.table} on {failure.day}: {failure.summary}")
        print(plan_outcome(plan, command(pipeline), result.run_id))
    return 0 if plan.promotable else 1


def _cmd_plan_show(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.pipelines import command
    from exact_backfills.plans import load_plan, version_note
    from resources.spark import get_spark

    plan, status = load_plan(get_spark(), pipeline, args.plan_id)
    if args.json:
        print(json.dumps({**plan.to_json(), "status": status}, indent=2))
        return 0
    print(version_note(plan) + f"\n(status: {status})")
    for failure in plan.blocking_failures:
        print(f"  BLOCKING {failure.check} of {failure.table} on {failure.day}: {failure.summary}")
    if status == "open" and plan.promotable:
        print(f"promote it with `{command(pipeline)} promote {plan.plan_id}`")
    return 0


def plan_outcome(plan: "Plan", command: str, run_id: str) -> str:
    """The line a plan ends with: what promoting it would do, if anything."""
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


def _cmd_promote(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.backfill import run_promotion
    from exact_backfills.dagster_names import PROMOTE_OP
    from exact_backfills.pipelines import command

    result = run_promotion(pipeline, args.plan_id)
    if not result.success:
        return _run_failed("promote", result, file=sys.stderr)
    print(result.output_for_node(PROMOTE_OP)["note"])
    print(
        f"promoted in run {result.run_id}; `{command(pipeline)} rollback --before-run {result.run_id} --start D1 "
        "--end D2` undoes it"
    )
    return 0


def _cmd_restate(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.backfill import run_restatement
    from exact_backfills.dagster_names import RESTATE_OP

    result = run_restatement(pipeline)
    if not result.success:
        return _run_failed("restatement", result)
    summary = result.output_for_node(RESTATE_OP)
    for table, days in summary["days_by_table"].items():
        print(f"restated {table}: {len(days)} day(s): {', '.join(days)}")
    if not summary["days_by_table"]:
        print("nothing to restate")
    for refused in summary["refused_files"]:
        print(f"refused by the landing contract, not read: {refused}")
    for table, days in summary["outside_window"].items():
        for found in days:
            print(
                f"late rows older than the restatement window on {found} ({table}): recorded in "
                "late_data_exceptions; backfill it by hand"
            )
    print(f"watermark: {summary['watermark']} (run {result.run_id})")
    return 0


def _cmd_runs(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills import liveness
    from exact_backfills.backfill import dagster_instance

    instance = dagster_instance()
    closed, active = liveness.close_dead_runs(instance) if args.close_dead else ([], liveness.active_runs(instance))
    for run in closed:
        print(f"marked failed: {run.describe()}")
    for run in active:
        print(run.describe())
    dead = [r for r in active if r.alive is False]
    if dead:
        print(f"{len(dead)} run(s) whose process is gone: `runs --close-dead` marks them failed")
    if not closed and not active:
        print("no active runs")
    return 1 if dead else 0


def _cmd_engine(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from pathlib import Path

    from resources import engine
    from resources.settings import settings
    from resources.spark import engine_settings

    configured = settings()
    home = Path(configured.spark_engine_home)
    if not configured.warm_engine:
        print(f"no warm engine in this profile (SPARK_ENGINE={configured.spark_engine}, SPARK_REMOTE, SPARK_MASTER)")
        return 0 if args.action == "status" else 2
    if args.action == "stop":
        stopped = engine.stop(home)
        print(f"stopped the warm Spark engine (pid {stopped.pid}, {stopped.url})" if stopped else "no engine was up")
        return 0
    found = engine.ensure(home, engine_settings(configured)) if args.action == "start" else engine.running(home)
    if found is None:
        print(f"the warm Spark engine is not up (it starts with the first command or run that needs Spark): {home}")
        return 1
    print(f"the warm Spark engine is up: {found.url}, pid {found.pid}, its log {home / engine.LOG_FILE}")
    return 0


def build_parser(pipeline: "Pipeline | None" = None, prog: str = "exact-backfills") -> argparse.ArgumentParser:
    """The command line; the selected pipeline's own commands among the rest when it is given."""
    parser = _Parser(prog=prog, description="Exact, idempotent backfills on Spark + Delta")
    parser.add_argument(
        "--pipeline",
        metavar="MODULE:ATTRIBUTE",
        help="the pipeline to work on (default: EXACT_BACKFILLS_PIPELINE, else the orders pipeline)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also show Spark's warnings on the terminal (always in the Spark log: `engine status` names it)",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("generate", help="land the pipeline's deterministic demo data")
    _range_args(p)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--rows-per-day", type=positive_int, default=200)
    p.add_argument("--bad-rate", type=share, default=0.0, help="share of rows that break the contract (default 0)")
    p.add_argument("--if-empty", action="store_true", help="only when none of the pipeline's sources has a batch yet")
    p.set_defaults(func=_cmd_generate)

    for own in pipeline.commands if pipeline else ():
        p = sub.add_parser(own.name, help=own.help)
        own.arguments(p)
        p.set_defaults(func=_pipeline_command(own.name))

    p = sub.add_parser("backfill", help="materialize a range for the chosen assets and everything downstream")
    _range_args(p)
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
    p.set_defaults(func=_cmd_backfill)

    p = sub.add_parser(
        "check", help="run every check on the published tables, recorded in Dagster; exit 1 when any fails"
    )
    _range_args(p)
    p.add_argument("--asset", help="one table (default: all)")
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("report", help="rows and SHA-256 per day; compare with another lake or Delta version")
    _range_args(p)
    p.add_argument("--asset", help="one table (default: all)")
    other = p.add_mutually_exclusive_group()
    other.add_argument("--against", help="another LAKE_ROOT holding the same tables (dual-run comparison)")
    other.add_argument("--version", type=version, help="the same table at this Delta version")
    other.add_argument("--plan", metavar="PLAN_ID", help="the version note of a plan: what its promotion changes")
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser(
        "rollback",
        help="restore a range across the graph (one commit per table), as a Dagster run; "
        "the days are then held until `release`",
    )
    p.add_argument(
        "--asset",
        help="only this table and the tables it is built from or builds (with --version: it alone, "
        "the tables derived from it rebuilt)",
    )
    p.add_argument("--start", type=day, required=True)
    p.add_argument("--end", type=day, required=True)
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--version", type=version, help="with --asset: the Delta version to restore its range to")
    to.add_argument("--before-run", help="restore what every table held before this Dagster run wrote it")
    to.add_argument("--before-backfill", help="restore what every table held before this backfill wrote it")
    p.add_argument("--dry-run", action="store_true", help="print what would be restored, per table and day, and stop")
    p.set_defaults(func=_cmd_rollback)

    p = sub.add_parser("release", help="publish days held since a rollback again from the landing, and release them")
    p.add_argument("--start", type=day, required=True)
    p.add_argument("--end", type=day, required=True)
    p.set_defaults(func=_cmd_release)

    p = sub.add_parser(
        "withdraw",
        help="take a landed file out of the landing (moved aside, with why) and publish again the days it touched",
    )
    p.add_argument("--file", required=True, help="the file, as `check` names it: <source>/ingest_date=D/<name>")
    p.add_argument("--reason", required=True, help="why it is withdrawn, kept beside the file")
    p.set_defaults(func=_cmd_withdraw)

    p = sub.add_parser(
        "stale",
        help="preview: which days of which tables are stale, and why: batches landed since they were written (what a "
        "restatement rewrites), or code changed since they were built",
    )
    p.add_argument("--json", action="store_true", help="print {table: {day: [why, ...]}} as JSON")
    p.set_defaults(func=_cmd_stale)

    p = sub.add_parser(
        "plan",
        help="plan a code change: rebuild the days older code built beside the lake, compare them day by day with "
        "what is published, publish nothing; exit 1 when a blocking check fails in the plan",
    )
    _range_args(p)
    p.add_argument("--select", help="comma-separated tables to start from (every table built from them follows)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--drop", metavar="PLAN_ID", help="remove a plan: its shadow tables deleted")
    p.set_defaults(func=_cmd_plan)
    shown = p.add_subparsers(dest="plan_action", parser_class=_Parser)
    show = shown.add_parser("show", help="a plan already built, as `plan` printed it (its status too)")
    show.add_argument("plan_id")
    show.add_argument("--json", action="store_true", help="print the plan as JSON, with its status")
    show.set_defaults(func=_cmd_plan_show)

    p = sub.add_parser("promote", help="promote a plan: exactly its changed days, one commit per table")
    p.add_argument("plan_id")
    p.set_defaults(func=_cmd_promote)

    p = sub.add_parser(
        "restate", help="restate the days late or corrected rows change, in every table (what the sensor does)"
    )
    p.set_defaults(func=_cmd_restate)

    p = sub.add_parser("runs", help="the active runs in the Dagster instance, and whether their process is alive")
    p.add_argument("--close-dead", action="store_true", help="mark the runs whose process is gone failed")
    p.set_defaults(func=_cmd_runs)

    p = sub.add_parser(
        "metrics",
        help="per asset: p95 run time, duplicates per thousand, mismatches, and how far it is "
        "behind its landing (stale days, newest day; landed data not yet published)",
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=_cmd_metrics)

    p = sub.add_parser(
        "engine", help="the warm Spark engine every command and run connects to: start it, stop it, or say if it is up"
    )
    p.add_argument("action", choices=["start", "stop", "status"])
    p.set_defaults(func=_cmd_engine)
    return parser


# The commands whose days must be partitions (generate may land days outside them: they are quarantined).
_WITHIN_PARTITIONS = {_cmd_backfill, _cmd_check, _cmd_report, _cmd_rollback, _cmd_release}


def _selection(argv: list[str]) -> str | None:
    """The `--pipeline` given before the command, if any."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--pipeline")
    known, _ = early.parse_known_args(argv)
    return known.pipeline


def main(argv: list[str] | None = None, pipeline: str | None = None, prog: str = "exact-backfills") -> int:
    """The command line; `pipeline` (`<module>:<attribute>`), when given, is the pipeline whatever else selects one."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        from exact_backfills.pipelines import load, selected_reference

        reference = pipeline or _selection(argv) or selected_reference()
        selected = load(reference)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args = build_parser(selected, prog).parse_args(argv)
    if args.verbose:
        os.environ["SPARK_VERBOSE"] = "1"  # read with the other settings when the Spark session starts
    try:
        from resources.lake import private_files
        from resources.settings import settings

        settings()  # a bad setting is an error naming the variable, not a traceback
        private_files()
        _checked_range(selected, args)
        from exact_backfills.instance import unreachable_services

        down = unreachable_services()  # a service that is down: named within seconds, not after a long retry
        if down:
            raise RuntimeError("\n".join(down))
        return int(args.func(selected, args))
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
