"""`python -m exact_backfills [--pipeline <module>:<attribute>] <command>` (also installed as `exact-backfills`): every
command works on the pipeline selected (EXACT_BACKFILLS_PIPELINE, else the orders pipeline). `python -m assets_pkg`
is the same command line on the orders pipeline.

The command line is one list of commands (`commands`), each with its arguments beside its handler, in a module per
family: writing, reading, restating, planning, lifecycle, machine."""

import argparse
import os
import sys
from typing import TYPE_CHECKING

from exact_backfills.cli import lifecycle, machine, planning, reading, restating, writing
from exact_backfills.cli.planning import plan_outcome
from exact_backfills.cli.reading import describe_metrics
from exact_backfills.cli.restating import describe_code_change, print_detection
from exact_backfills.cli.table import Command, Parser

if TYPE_CHECKING:
    from exact_backfills.declare import Pipeline

__all__ = [
    "Command",
    "build_parser",
    "command",
    "commands",
    "describe_code_change",
    "describe_metrics",
    "main",
    "plan_outcome",
    "print_detection",
]


def commands(pipeline: "Pipeline | None" = None) -> list[Command]:
    """Every command, in the order `--help` lists them; the selected pipeline's own among them when it is given."""
    return [
        writing.GENERATE,
        *writing.pipeline_commands(pipeline),
        writing.BACKFILL,
        reading.CHECK,
        reading.REPORT,
        writing.ROLLBACK,
        writing.RELEASE,
        writing.WITHDRAW,
        writing.VACUUM,
        restating.STALE,
        planning.PLAN,
        planning.PROMOTE,
        lifecycle.RENAME,
        lifecycle.RETIRE,
        restating.RESTATE,
        machine.RUNS,
        reading.METRICS,
        machine.ENGINE,
    ]


def build_parser(pipeline: "Pipeline | None" = None, prog: str = "exact-backfills") -> argparse.ArgumentParser:
    """The command line; the selected pipeline's own commands among the rest when it is given."""
    parser = Parser(prog=prog, description="Exact, idempotent backfills on Spark + Delta")
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
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in commands(pipeline):
        command.add_to(sub)
    return parser


def _checked_range(pipeline: "Pipeline", args: argparse.Namespace) -> None:
    """--start after --end, or a day outside the pipeline's partitions: one line naming both, before anything runs.
    Only the commands `within_partitions` need their days to be partitions (generate may land days outside them: they
    are quarantined)."""
    start, end = getattr(args, "start", None), getattr(args, "end", None)
    if start and end and start > end:
        raise ValueError(f"--start {start} is after --end {end}")
    if args.within_partitions:
        partitions = pipeline.partitions
        for flag, value in (("--start", start), ("--end", end)):
            if value and value not in partitions:
                raise ValueError(
                    f"{flag} {value} is outside the partitions {partitions.first_day}..{partitions.last_day} "
                    f"(the calendar of pipeline {pipeline.name}, or PARTITION_START_DATE, PARTITION_END_DATE)"
                )


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


def command() -> None:
    """The installed `exact-backfills`: `main`, its process ended as `cli.ending` says."""
    from exact_backfills.cli.ending import end

    end(main())
