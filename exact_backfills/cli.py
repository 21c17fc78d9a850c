"""`python -m assets_pkg <command>` (also installed as `assets-pkg`)."""

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import date
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from exact_backfills.code_staleness import CodeChange
    from exact_backfills.late_data import Detection


class _Parser(argparse.ArgumentParser):
    """A mistyped command is one line: what is wrong (`--help` for the rest), not the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _day(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a YYYY-MM-DD date: {value!r}") from None


def _number(kind: type[float] | type[int], low: float, inclusive: bool, what: str) -> Callable[[str], Any]:
    def parse(value: str) -> Any:
        try:
            number = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {value!r}") from None
        if number < low or (number == low and not inclusive):
            raise argparse.ArgumentTypeError(f"not {what}: {value!r}")
        return number

    return parse


_positive_int = _number(int, 0, False, "a whole number above 0")
_version = _number(int, 0, True, "a Delta version (0 or above)")
_positive = _number(float, 0, False, "a number above 0")


def _share(value: str) -> float:
    share = _number(float, 0, True, "a share between 0 and 1")(value)
    if share > 1:
        raise argparse.ArgumentTypeError(f"not a share between 0 and 1: {value!r}")
    return share


def _range_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--start", type=_day, default=None, help="first day (default: first partition)")
    p.add_argument("--end", type=_day, default=None, help="last day, inclusive (default: last partition)")


def _cmd_generate(args: argparse.Namespace) -> int:
    from assets_pkg.generate import generate
    from resources.spark import get_spark

    summary = generate(
        get_spark(), args.start or first_day(), args.end or last_day(), args.seed, args.rows_per_day, args.bad_rate
    )
    print(
        f"landed {summary.order_item_rows} order item rows in {len(summary.batches)} batches "
        f"({summary.duplicates} duplicate deliveries, {summary.corrections} corrections of which {summary.moved_days} "
        f"move a day, {summary.late_rows} late rows, {summary.bad_rows} bad rows) and {summary.product_rows} product "
        f"rows ({summary.product_changes} status changes)"
    )
    return _observe()


def _observe() -> int:
    from exact_backfills.backfill import observe_landing, step_failures

    result = observe_landing()
    for step, message in step_failures(result):
        print(f"observing the landing failed in {step}: {message}")
    if result.success:
        print(f"landing observed in Dagster (run {result.run_id})")
    return 0 if result.success else 1


def _cmd_import_tpch(args: argparse.Namespace) -> int:
    from assets_pkg.tpch import import_tpch
    from resources.spark import get_spark

    result = import_tpch(get_spark(), args.scale, args.through)
    print(f"landed TPC-H SF{args.scale:g}: {result}")
    return _observe()


def _cmd_backfill(args: argparse.Namespace) -> int:
    from exact_backfills.backfill import run_backfill

    ok = run_backfill(
        args.start or first_day(),
        args.end or last_day(),
        select=args.select.split(",") if args.select else None,
        chunk_size=args.max_partitions_per_run,
        dry_run=args.dry_run,
    )
    return 0 if ok else 1


def _tables(args: argparse.Namespace) -> list[str]:
    from assets_pkg.tables import PUBLISH_ORDER

    if args.asset and args.asset not in PUBLISH_ORDER:
        raise ValueError(f"unknown asset {args.asset!r}; one of: {', '.join(PUBLISH_ORDER)}")
    return [args.asset] if args.asset else list(PUBLISH_ORDER)


def _checked_range(args: argparse.Namespace) -> None:
    """--start after --end, or a day outside the partitions: one line naming both, before anything runs."""
    start, end = getattr(args, "start", None), getattr(args, "end", None)
    if start and end and start > end:
        raise ValueError(f"--start {start} is after --end {end}")
    if args.func in _WITHIN_PARTITIONS:
        for flag, day in (("--start", start), ("--end", end)):
            if day and not first_day() <= day <= last_day():
                raise ValueError(
                    f"{flag} {day} is outside the partitions {first_day()}..{last_day()} "
                    "(PARTITION_START_DATE, PARTITION_END_DATE)"
                )


def _cmd_check(args: argparse.Namespace) -> int:
    from exact_backfills.backfill import run_checks, step_failures

    start, end = args.start or first_day(), args.end or last_day()
    tables = _tables(args)
    result, evaluations = run_checks(start, end, tables)
    errors = step_failures(result, failed_checks=False)
    for step, message in errors:
        print(f"{step} could not be checked: {message}")
    failed = len(errors)
    for table in tables:
        mine = [e for e in evaluations if e.asset_key.to_user_string() == table]
        bad = sorted((e for e in mine if not e.passed), key=lambda e: (e.partition, e.check_name))
        failed += len(bad)
        print(f"{table}: {len(mine) - len(bad)}/{len(mine)} check results passed over {start}..{end}")
        for e in bad:
            print(f"  FAIL {e.check_name} {e.description}")
    print(f"recorded in Dagster as run {result.run_id}")
    failed += _report_refused_files()
    return 1 if failed else 0


def _report_refused_files() -> int:
    from exact_backfills import landing

    refused = [(dataset, r) for dataset in landing.SCHEMAS for r in landing.refused_files(dataset)]
    for dataset, r in refused:
        print(f"REFUSED {dataset}/{r.describe()}")
    if refused:
        print(
            f"{len(refused)} landed file(s) refused by the landing contract (order item files are kept in quarantine "
            "as one row each); take one out with `withdraw --file <dataset>/<file> --reason ...`"
        )
    return len(refused)


def _cmd_withdraw(args: argparse.Namespace) -> int:
    from exact_backfills.backfill import run_backfill
    from exact_backfills.dagster_names import WITHDRAWN_TAG
    from exact_backfills.operations import withdraw
    from resources.delta_io import day_runs
    from resources.spark import get_spark

    done = withdraw(get_spark(), args.file, args.reason)
    print(f"withdrew {done.dataset}/{done.file} to {done.moved_to}")
    if not done.days:
        print("no published day holds its rows: nothing to publish again")
        return 0
    print(f"publishing again {len(done.days)} day(s) its rows are or could be on")
    ok = all(run_backfill(a, b, tags={WITHDRAWN_TAG: f"{done.dataset}/{done.file}"}) for a, b in day_runs(done.days))
    return 0 if ok else 1


def _cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from exact_backfills.operations import report
    from resources.spark import get_spark

    if args.plan:
        from exact_backfills.plans import load_plan, version_note

        plan, status = load_plan(get_spark(), args.plan)
        print(version_note(plan) + f"\n(status: {status})")
        return 0
    start, end = args.start or first_day(), args.end or last_day()
    against = Path(args.against).resolve() if args.against else None
    mismatches = 0
    compared = against is not None or args.version is not None
    for table in _tables(args):
        print(f"{table}:" + (f" compared with {against or f'version {args.version}'}" if compared else ""))
        for day in report(get_spark(), table, start, end, against=against, version=args.version):
            line = f"  {day.day} rows={day.rows:<8} sha256={day.fingerprint or '-'}"
            if day.other is not None:
                line += (
                    "  match"
                    if day.matches
                    else f"  MISMATCH other_rows={day.other.rows} other_sha256={day.other.fingerprint or '-'}"
                )
                mismatches += not day.matches
            print(line)
    if mismatches:
        print(f"{mismatches} mismatching partition(s)")
    return 1 if mismatches else 0


def _cmd_rollback(args: argparse.Namespace) -> int:
    from exact_backfills.backfill import run_rollback, step_failures
    from exact_backfills.rollback import plan_rollback, preview
    from resources.spark import get_spark

    if args.asset:
        _tables(args)
    if args.version is not None and not args.asset:
        raise ValueError("--version needs --asset: a version is one table's")
    spark = get_spark()
    plan = plan_rollback(spark, args.start, args.end, args.asset, args.version, args.before_run, args.before_backfill)
    print(f"rollback {plan.describe()}")
    if args.dry_run:
        days = preview(spark, plan)
        for d in days:
            print(
                f"  {d.table} {d.day}: {d.now.rows} rows ({(d.now.fingerprint or '-')[:12]}) -> "
                f"{d.after.rows} rows ({(d.after.fingerprint or '-')[:12]})" + ("" if d.changes else " unchanged")
            )
        print(f"dry run: nothing written ({sum(d.changes for d in days)} table-day(s) would change)")
        return 0
    result = run_rollback(plan)
    if not result.success:
        for _, message in step_failures(result):
            print(f"rollback failed (run {result.run_id}): {message}")
        return 1
    print(
        f"rolled back in run {result.run_id}; the days are held: restatements leave them as they are until "
        f"`release --start {args.start} --end {args.end}` publishes them again from the landing"
    )
    return 0


def _cmd_release(args: argparse.Namespace) -> int:
    from exact_backfills.backfill import run_backfill
    from exact_backfills.dagster_names import RELEASE_TAG

    return 0 if run_backfill(args.start, args.end, tags={RELEASE_TAG: "true"}) else 1


def _cmd_metrics(args: argparse.Namespace) -> int:
    from exact_backfills.operations import metrics
    from resources.spark import get_spark

    figures = metrics(get_spark())
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    lag = "-" if figures["landing_lag_s"] is None else f"{figures['landing_lag_s']:.0f} s"
    print(
        f"landing: newest batch {figures['newest_landed_batch'] or '-'}, "
        f"newest day {figures['newest_landed_day'] or '-'}; "
        f"watermark {figures['watermark'] or '- (never restated)'}; landed data not yet published: {lag}"
    )
    print(
        f"{'asset':<26}{'runs':>6}{'p95 run s':>11}{'dup per 1k':>12}{'mismatches':>12}{'stale days':>12}  newest day"
    )
    for m in figures["assets"]:
        stale = "-" if m["stale_days"] is None else m["stale_days"]
        print(
            f"{m['asset']:<26}{m['runs']:>6}{m['p95_run_s']:>11}{m['duplicate_per_1k'] or 0:>12}"
            f"{m['mismatch_count'] or 0:>12}{stale:>12}  {m['newest_published_day'] or '-'}"
        )
    return 0


def _print_detection(detection: "Detection") -> None:
    from exact_backfills.late_data import DIMENSION

    print(
        f"watermark: {detection.watermark.watermark_ts or '-'} -> {detection.new_watermark_ts or '-'}; restatement "
        f"window from {detection.window_start or '-'}"
    )
    for dataset, batches in detection.batches_read.items():
        print(f"  {dataset}: {len(batches)} batch(es) read{': ' + ', '.join(batches[-5:]) if batches else ''}")
    for table, days in detection.days_by_table().items():
        if days:
            print(f"{table}: {len(days)} day(s) to restate")
    for name, changes in (("order tables", detection.order_days), (DIMENSION.name, detection.product_days)):
        for day, change in sorted(changes.items()):
            print(f"  {name} {day}: {change.describe()}")
    for day, change in sorted(detection.outside.items()):
        print(f"  OUTSIDE WINDOW {day}: {change.describe()}: not restated automatically; backfill it by hand")
    for refused in detection.refused:
        print(f"  REFUSED {refused.describe()}: not read (order item files are kept in quarantine)")
    for hold in detection.holds:
        landed = detection.held.get(hold.day)
        print(
            f"  HELD {hold.describe()}{': landed since: ' + landed.describe() if landed else ''}; "
            f"`release --start {hold.day} --end {hold.day}` publishes it again, `withdraw` takes a batch out"
        )


def _print_code_changes(stale: "dict[str, dict[date, CodeChange]]") -> None:
    from exact_backfills.publish import day_ranges

    for table, days in stale.items():
        by_change: dict[CodeChange, list[date]] = {}
        for day, change in days.items():
            by_change.setdefault(change, []).append(day)
        for change, changed in by_change.items():
            print(f"{table}: {change.describe()} on {len(changed)} day(s): {day_ranges(sorted(changed))}")


def _stale_json(detection: "Detection", stale: "dict[str, dict[date, CodeChange]]") -> dict[str, dict[str, list[str]]]:
    """table -> day -> why it is stale: "landing" (batches landed since), "code" (its code, or an upstream's,
    changed), "late_data_outside_window" (late rows older than the restatement window)."""
    from exact_backfills.late_data import STAGING

    reasons: dict[str, dict[str, list[str]]] = {}

    def add(table: str, day: date, reason: str) -> None:
        reasons.setdefault(table, {}).setdefault(day.isoformat(), []).append(reason)

    for table, days in detection.days_by_table().items():
        for day in days:
            add(table, day, "landing")
    for table, changes in stale.items():
        for day in changes:
            add(table, day, "code")
    for day in detection.outside:
        add(STAGING.name, day, "late_data_outside_window")
    return {t: dict(sorted(days.items())) for t, days in reasons.items()}


def _cmd_stale(args: argparse.Namespace) -> int:
    from exact_backfills.late_data import detect
    from exact_backfills.verification import stale_code_days
    from resources.spark import get_spark

    spark = get_spark()
    detection = detect(spark)
    stale = {table: days for table, days in stale_code_days(spark).items() if days}
    if args.json:
        print(json.dumps(_stale_json(detection, stale), indent=2))
        return 0
    _print_detection(detection)
    _print_code_changes(stale)
    if not any(detection.days_by_table().values()) and not detection.outside and not detection.holds and not stale:
        print("nothing is stale")
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from assets_pkg.tables import PUBLISH_ORDER, downstream
    from exact_backfills import estimates
    from exact_backfills.backfill import dagster_instance, run_plan, step_failures
    from exact_backfills.dagster_names import PLAN_OP
    from exact_backfills.plans import Plan, drop, version_note
    from resources.spark import get_spark

    if args.drop:
        drop(get_spark(), args.drop, "plan --drop")
        print(f"plan {args.drop} dropped: its shadow tables are deleted")
        return 0
    select = args.select.split(",") if args.select else None
    start, end = args.start or first_day(), args.end or last_day()
    instance = dagster_instance()
    tables = downstream(set(select)) if select else list(PUBLISH_ORDER)
    # The session the plan job's run uses (a short run's): started here, for the estimate, as the run would start it.
    estimate = estimates.for_plan(get_spark(short_runs=True), instance, start, end, tables)
    said = sys.stderr if args.json else sys.stdout  # with --json, stdout is the plan alone
    for line in estimates.describe("plan", estimate, upper_bound=True):
        print(line, file=said)
    started = time.monotonic()
    result = run_plan(start, end, select, instance)
    if not result.success:
        for _, message in step_failures(result):
            print(f"plan failed (run {result.run_id}): {message}", file=sys.stderr)
        return 1
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
        if plan.promotable:
            print(
                f"nothing published changed; promote it with `python -m assets_pkg promote {plan.plan_id}` "
                f"(run {result.run_id})"
            )
        else:
            print(f"plan {plan.plan_id} cannot be promoted: blocking checks failed in its shadow tables")
    return 0 if plan.promotable else 1


def _cmd_promote(args: argparse.Namespace) -> int:
    from exact_backfills.backfill import run_promotion, step_failures
    from exact_backfills.dagster_names import PROMOTE_OP

    result = run_promotion(args.plan_id)
    if not result.success:
        for _, message in step_failures(result):
            print(f"promote refused (run {result.run_id}): {message}", file=sys.stderr)
        return 1
    print(result.output_for_node(PROMOTE_OP)["note"])
    print(f"promoted in run {result.run_id}; `rollback --before-run {result.run_id} --start D1 --end D2` undoes it")
    return 0


def _cmd_restate(args: argparse.Namespace) -> int:
    from exact_backfills.backfill import run_restatement, step_failures
    from exact_backfills.dagster_names import RESTATE_OP

    result = run_restatement()
    if not result.success:
        for _, message in step_failures(result):
            print(f"restatement failed (run {result.run_id}): {message}")
        return 1
    summary = result.output_for_node(RESTATE_OP)
    for table, days in summary["days_by_table"].items():
        print(f"restated {table}: {len(days)} day(s): {', '.join(days)}")
    if not summary["days_by_table"]:
        print("nothing to restate")
    for refused in summary["refused_files"]:
        print(f"refused by the landing contract, not read: {refused}")
    for day in summary["outside_window"]:
        print(
            f"late rows older than the restatement window on {day}: recorded in late_data_exceptions; "
            "backfill it by hand"
        )
    print(f"watermark: {summary['watermark']} (run {result.run_id})")
    return 0


def _cmd_runs(args: argparse.Namespace) -> int:
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


def _cmd_engine(args: argparse.Namespace) -> int:
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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="assets-pkg", description="Exact, idempotent backfills on Spark + Delta")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also show Spark's warnings on the terminal (always in the Spark log: `engine status` names it)",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("generate", help="land deterministic demo data")
    _range_args(p)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--rows-per-day", type=_positive_int, default=200)
    p.add_argument("--bad-rate", type=_share, default=0.0, help="share of rows that break the contract (default 0)")
    p.set_defaults(func=_cmd_generate)

    p = sub.add_parser("import-tpch", help="land TPC-H data generated by tpchgen-cli")
    p.add_argument("--scale", type=_positive, default=0.1)
    p.add_argument(
        "--through", type=_day, default=None, help="land only the orders placed up to this day (default: every order)"
    )
    p.set_defaults(func=_cmd_import_tpch)

    p = sub.add_parser("backfill", help="materialize a range for the chosen assets and everything downstream")
    _range_args(p)
    p.add_argument("--select", help="comma-separated asset names (default: all)")
    p.add_argument(
        "--max-partitions-per-run",
        type=_positive_int,
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
    other.add_argument("--version", type=_version, help="the same table at this Delta version")
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
    p.add_argument("--start", type=_day, required=True)
    p.add_argument("--end", type=_day, required=True)
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--version", type=_version, help="with --asset: the Delta version to restore its range to")
    to.add_argument("--before-run", help="restore what every table held before this Dagster run wrote it")
    to.add_argument("--before-backfill", help="restore what every table held before this backfill wrote it")
    p.add_argument("--dry-run", action="store_true", help="print what would be restored, per table and day, and stop")
    p.set_defaults(func=_cmd_rollback)

    p = sub.add_parser("release", help="publish days held since a rollback again from the landing, and release them")
    p.add_argument("--start", type=_day, required=True)
    p.add_argument("--end", type=_day, required=True)
    p.set_defaults(func=_cmd_release)

    p = sub.add_parser(
        "withdraw",
        help="take a landed file out of the landing (moved aside, with why) and publish again the days it touched",
    )
    p.add_argument("--file", required=True, help="the file, as `check` names it: <dataset>/ingest_date=D/<name>")
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


# Imported when called: exact_backfills.partitions reads the settings on import, which main() validates first so that a
# bad setting is an error naming the variable rather than a traceback.
def first_day() -> date:
    from exact_backfills.partitions import first_day

    return first_day()


def last_day() -> date:
    from exact_backfills.partitions import last_day

    return last_day()


# The commands whose days must be partitions (generate may land days outside them: they are quarantined).
_WITHIN_PARTITIONS = {_cmd_backfill, _cmd_check, _cmd_report, _cmd_rollback, _cmd_release}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.verbose:
        os.environ["SPARK_VERBOSE"] = "1"  # read with the other settings when the Spark session starts
    try:
        from resources.settings import settings

        settings()  # a bad setting is an error naming the variable, not a traceback
        _checked_range(args)
        from exact_backfills.instance import unreachable_services

        down = unreachable_services()  # a service that is down: named within seconds, not after a long retry
        if down:
            raise RuntimeError("\n".join(down))
        return args.func(args)
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
