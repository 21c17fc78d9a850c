"""The commands by which tables come and go: a renamed table's days move from its former name; a table no longer
declared is retired, archived or dropped, explicitly."""

import argparse
from typing import TYPE_CHECKING

from exact_backfills.cli.table import Command, run_failed

if TYPE_CHECKING:
    from exact_backfills.declare import Pipeline


def _retire(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.retirement import Retirement, retire
    from resources import audit
    from resources.spark import get_spark

    how = Retirement.DROP if args.drop else Retirement.ARCHIVE  # refused: one line, exit 2 (RetirementRefused)
    print(retire(pipeline, args.table, how, audit.built_by(get_spark(), pipeline.name)))
    return 0


def _retire_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--table", required=True, help="a table the pipeline published and no longer declares")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--archive", action="store_true", help="move it under the lake's _retired folder, whole")
    how.add_argument("--drop", action="store_true", help="delete it and every version of it")


RETIRE = Command(
    "retire",
    "archive (moved aside, readable) or drop a table the pipeline no longer declares; its history in Dagster is kept",
    _retire,
    _retire_arguments,
)


def _rename(pipeline: "Pipeline", args: argparse.Namespace) -> int:
    from exact_backfills.backfill import dagster_instance, run_rename
    from exact_backfills.dagster_names import RENAME_OP
    from exact_backfills.pipelines import command

    result = run_rename(pipeline, dagster_instance())
    if not result.success:
        return run_failed("rename", result)
    moved: dict[str, list[str]] = result.output_for_node(RENAME_OP)
    for table, days in moved.items():
        former = pipeline.renamed[table]
        print(
            f"{table}: {len(days)} day(s) moved from {former} without a rebuild (run {result.run_id}); {former} is "
            f"left as it was: `{command(pipeline)} retire --table {former} --archive` (or --drop) when done with it"
        )
    if not moved:
        print("nothing to rename: every renamed table has its former name's days")
    return 0


RENAME = Command(
    "rename",
    "move each renamed table's days (Table(..., renamed_from=...)) from its former name, without a rebuild",
    _rename,
)
