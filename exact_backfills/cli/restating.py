"""The commands of late and changed data: which days are stale and why, and the restatement that rewrites them."""

import argparse
import json
from datetime import date
from typing import TYPE_CHECKING

from exact_backfills.cli.table import Command, run_failed

if TYPE_CHECKING:
    from exact_backfills.declare import Pipeline
    from exact_backfills.dependencies import CodeChange
    from exact_backfills.late_data import Detection
    from exact_backfills.renaming import PendingRename


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


def _print_never_built(pipeline: "Pipeline", unbuilt: dict[str, list[date]]) -> None:
    from exact_backfills.pipelines import command
    from exact_backfills.publish import day_ranges
    from resources.delta_io import day_runs

    for table, days in unbuilt.items():
        builds = "; ".join(
            f"`{command(pipeline)} backfill --select {table} --start {a} --end {b}`" for a, b in day_runs(days)
        )
        print(f"{table}: never built on {len(days)} day(s) its upstream tables have: {day_ranges(days)} ({builds})")


def _stale_json(
    detection: "Detection",
    stale: "dict[str, dict[date, CodeChange]]",
    unbuilt: dict[str, list[date]],
    renames: "list[PendingRename]",
) -> dict[str, dict[str, list[str]]]:
    """table -> day -> why it is stale: "landing" (batches landed since), "code" (its code, or an upstream's,
    changed), "late_data_outside_window" (late rows older than the restatement window), "never_built" (its upstream
    tables have the day, it does not: a table just declared), "renamed" (its former name has it: `rename` moves it)."""
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
    for table, days in unbuilt.items():
        for found in days:
            add(table, found, "never_built")
    for rename in renames:
        for found in rename.days:
            add(rename.table, found, "renamed")
    return {t: dict(sorted(days.items())) for t, days in reasons.items()}


def _stale(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.late_data import detect
    from exact_backfills.pipelines import command
    from exact_backfills.renaming import pending_renames
    from exact_backfills.retirement import no_longer_declared
    from exact_backfills.verification import never_built_days, stale_code_days
    from resources import audit
    from resources.spark import get_spark

    spark = get_spark()
    detection = detect(spark, pipeline)
    written = audit.built_by(spark, pipeline.name)  # read once for all
    stale = {table: days for table, days in stale_code_days(spark, pipeline, written).items() if days}
    renames = pending_renames(pipeline, written)
    moving = {r.table: set(r.days) for r in renames}  # never built under its name: its rename moves them
    unbuilt = {
        t: kept
        for t, days in never_built_days(spark, pipeline, written).items()
        if (kept := sorted(set(days) - moving.get(t, set())))
    }
    if args.json:
        print(json.dumps(_stale_json(detection, stale, unbuilt, renames), indent=2))
        return 0
    print_detection(pipeline, detection)
    _print_code_changes(stale)
    _print_never_built(pipeline, unbuilt)
    undeclared = no_longer_declared(pipeline, written)
    for said in [
        *(r.describe(command(pipeline)) for r in renames),
        *(u.describe(command(pipeline)) for u in undeclared),
    ]:
        print(said)
    found = any(detection.days_by_table().values()) or bool(detection.outside or detection.holds)
    if not (found or stale or unbuilt or renames or undeclared):
        print("nothing is stale")
    return 0


def _stale_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print {table: {day: [why, ...]}} as JSON")


def _restate(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.automation import RestatementSummary
    from exact_backfills.backfill import run_restatement
    from exact_backfills.dagster_names import RESTATE_OP

    result = run_restatement(pipeline)
    if not result.success:
        return run_failed("restatement", result)
    summary: RestatementSummary = result.output_for_node(RESTATE_OP)
    for table, days in summary.days_by_table.items():
        print(f"restated {table}: {len(days)} day(s): {', '.join(d.isoformat() for d in days)}")
    if not summary.days_by_table:
        print("nothing to restate")
    for refused in summary.refused_files:
        print(f"refused by the landing contract, not read: {refused}")
    for table, days in summary.outside_window.items():
        for found in days:
            print(
                f"late rows older than the restatement window on {found} ({table}): recorded in "
                "late_data_exceptions; backfill it by hand"
            )
    watermark = summary.watermark.isoformat() if summary.watermark else None
    print(f"watermark: {watermark} (run {result.run_id})")
    return 0


STALE = Command(
    "stale",
    "preview: which days of which tables are stale, and why: batches landed since they were written (what a "
    "restatement rewrites), or code changed since they were built",
    _stale,
    _stale_arguments,
)
RESTATE = Command(
    "restate", "restate the days late or corrected rows change, in every table (what the sensor does)", _restate
)
