"""The command line as a table: each command one `Command` (its name, help, the function adding its arguments, its
handler), and the parser built from a list of them."""

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn, TextIO

from exact_backfills.arguments import day

if TYPE_CHECKING:
    from dagster import ExecuteInProcessResult

    from exact_backfills.declare import Pipeline

Handler = Callable[["Pipeline", argparse.Namespace], int]


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """A command that takes no argument."""


@dataclass(frozen=True)
class Command:
    """One command of the command line: `arguments` adds its options to its parser, `run` handles it (its exit code).
    `within_partitions`: its --start and --end must be days of the partitions (checked before anything runs).
    `actions`: commands of its own under it (`plan show`)."""

    name: str
    help: str
    run: Handler
    arguments: Callable[[argparse.ArgumentParser], None] = no_arguments
    within_partitions: bool = False
    actions: Sequence["Command"] = ()

    def add_to(self, commands: "argparse._SubParsersAction[Parser]") -> None:
        parser = commands.add_parser(self.name, help=self.help)
        self.arguments(parser)
        parser.set_defaults(func=self.run, within_partitions=self.within_partitions)
        if self.actions:
            actions = parser.add_subparsers(dest=f"{self.name}_action", parser_class=Parser)
            for action in self.actions:
                action.add_to(actions)


class Parser(argparse.ArgumentParser):
    """A mistyped command is one line: what is wrong (`--help` for the rest), not the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def run_failed(what: str, result: "ExecuteInProcessResult", file: TextIO | None = None) -> int:
    """A failed run's one line per failed step (on stdout unless `file`); exit 2 when the machinery refused it
    (nothing written), else 1."""
    from exact_backfills.backfill import step_failures

    failures = step_failures(result)
    for failure in failures:
        said = f"{what} {'refused' if failure.refused else 'failed'} (run {result.run_id}): {failure.cause}"
        print(said, file=file or sys.stdout)
    return 2 if any(f.refused for f in failures) else 1


def range_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--start", type=day, default=None, help="first day (default: first partition)")
    p.add_argument("--end", type=day, default=None, help="last day, inclusive (default: last partition)")


def required_range_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--start", type=day, required=True)
    p.add_argument("--end", type=day, required=True)


def tables(pipeline: "Pipeline", args: argparse.Namespace) -> list[str]:
    if args.asset and args.asset not in pipeline.publish_order:
        raise ValueError(f"unknown asset {args.asset!r}; one of: {', '.join(pipeline.publish_order)}")
    return [args.asset] if args.asset else list(pipeline.publish_order)


def tables_and_quarantine(pipeline: "Pipeline", args: argparse.Namespace) -> list[str]:
    """What `check` and `report` look at: the tables asked for (--asset, else every one) with their quarantine, or a
    quarantine table on its own."""
    if args.asset in pipeline.side_table_of:
        return [args.asset]
    return pipeline.with_side_tables(tables(pipeline, args))


def observe(pipeline: "Pipeline") -> int:
    from exact_backfills.backfill import observe_landing, step_failures

    result = observe_landing(pipeline)
    for failure in step_failures(result):
        print(f"observing the landing failed in {failure.step}: {failure.cause}")
    if result.success:
        print(f"landing observed in Dagster (run {result.run_id})")
    return 0 if result.success else 1
