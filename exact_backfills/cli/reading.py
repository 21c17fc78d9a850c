"""The commands that look at what is published: check it, report it day by day (compared with another lake or Delta
version), and its metrics."""

import argparse
import json
from typing import TYPE_CHECKING

from exact_backfills.arguments import version
from exact_backfills.cli.table import Command, range_args, tables_and_quarantine

if TYPE_CHECKING:
    from exact_backfills.declare import Pipeline
    from exact_backfills.metrics import Metrics


def _check(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.backfill import run_checks, step_failures

    start, end = args.start or pipeline.partitions.first_day, args.end or pipeline.partitions.last_day
    tables = tables_and_quarantine(pipeline, args)
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


def _asset_arguments(p: argparse.ArgumentParser) -> None:
    range_args(p)
    p.add_argument("--asset", help="one table (default: all)")


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


def _report(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.operations import Compared, report
    from resources import storage
    from resources.spark import get_spark

    if args.plan:
        from exact_backfills.plans import load_plan, version_note

        plan, status = load_plan(get_spark(), pipeline, args.plan)
        print(version_note(plan) + f"\n(status: {status})")
        return 0
    start, end = args.start or pipeline.partitions.first_day, args.end or pipeline.partitions.last_day
    against = storage.normalized(args.against) if args.against else None
    compared = Compared(lake=against, version=args.version) if against is not None or args.version is not None else None
    mismatches = 0
    for table in tables_and_quarantine(pipeline, args):
        print(f"{table}:" + (f" compared with {against or f'version {args.version}'}" if compared else ""))
        for found in report(get_spark(), pipeline, table, start, end, compared):
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


def _report_arguments(p: argparse.ArgumentParser) -> None:
    _asset_arguments(p)
    other = p.add_mutually_exclusive_group()
    other.add_argument("--against", help="another LAKE_ROOT holding the same tables (dual-run comparison)")
    other.add_argument("--version", type=version, help="the same table at this Delta version")
    other.add_argument("--plan", metavar="PLAN_ID", help="the version note of a plan: what its promotion changes")


def describe_metrics(figures: "Metrics") -> list[str]:
    """The metrics as the terminal shows them: the landing, then a line per asset."""
    from exact_backfills.publish import day_ranges

    landed = figures.landing
    lag = "-" if landed.landing_lag_s is None else f"{landed.landing_lag_s:.0f} s"
    watermark = landed.watermark.isoformat() if landed.watermark else "- (never restated)"
    lines = [
        f"landing: newest batch {landed.newest_landed_batch or '-'}, newest day {landed.newest_landed_day or '-'}; "
        f"watermark {watermark}; landed data not yet published: {lag}"
    ]
    width = max([26, *(len(m.asset) + 2 for m in figures.assets)])
    lines.append(
        f"{'asset':<{width}}{'runs':>6}{'p95 run s':>11}{'dup per 1k':>12}{'mismatches':>12}{'stale days':>12}"
        "  newest day"
    )
    for m in figures.assets:
        stale = "-" if m.stale_days is None else m.stale_days
        lines.append(
            f"{m.asset:<{width}}{m.runs:>6}{m.p95_run_s:>11}{m.duplicate_per_1k or 0:>12}"
            f"{m.mismatch_count or 0:>12}{stale:>12}  {m.newest_published_day or '-'}"
            + (f"  missed deadlines: {day_ranges(m.missed_deadlines)}" if m.missed_deadlines else "")
        )
    return lines


def _metrics(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.metrics import metrics
    from resources.spark import get_spark

    figures = metrics(get_spark(), pipeline)
    print(json.dumps(figures.to_json(), indent=2) if args.json else "\n".join(describe_metrics(figures)))
    return 0


def _json_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the figures as JSON")


CHECK = Command(
    "check",
    "run every check on the published tables, recorded in Dagster; exit 1 when any fails",
    _check,
    _asset_arguments,
    within_partitions=True,
)
REPORT = Command(
    "report",
    "rows and SHA-256 per day; compare with another lake or Delta version",
    _report,
    _report_arguments,
    within_partitions=True,
)
METRICS = Command(
    "metrics",
    "per asset: p95 run time, duplicates per thousand, mismatches, and how far it is behind its landing (stale "
    "days, newest day; landed data not yet published)",
    _metrics,
    _json_argument,
)
