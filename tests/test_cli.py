"""The command line says what went wrong, and its exit code says whether it worked."""

import subprocess
import sys
from datetime import date

import pytest

from exact_backfills import clock
from exact_backfills.cli import main
from tests.support import visits
from tests.support.lake import environment


@pytest.fixture(autouse=True)
def _lake(lake):
    return lake


def test_backfill_of_an_empty_lake_fails_and_names_the_missing_landing(capsys, lake):
    assert main(["backfill", "--start", "2025-01-01", "--end", "2025-01-02", "--select", "stg_order_items"]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "no landed batches under" in out


def test_backfill_outside_the_partitions_is_refused(capsys):
    assert main(["backfill", "--start", "2024-12-01", "--end", "2025-01-02"]) == 2
    assert "--start 2024-12-01 is outside the partitions 2025-01-01..2025-03-31" in capsys.readouterr().err


def test_each_pipeline_refuses_the_days_outside_its_own_calendar(capsys):
    with environment(PARTITION_START_DATE="", PARTITION_END_DATE=""):  # unset: each pipeline's own calendar
        assert main(["backfill", "--start", "2024-12-01", "--end", "2024-12-02"]) == 2
        orders = capsys.readouterr().err
        assert main(["--pipeline", visits.REFERENCE, "check", "--start", "2024-11-30", "--end", "2024-12-02"]) == 2
        earlier = capsys.readouterr().err
    said = "is outside the partitions {} (the calendar of pipeline {}, or PARTITION_START_DATE, PARTITION_END_DATE)"
    orders_days, visits_days = f"2025-01-01..{clock.today('UTC')}", f"2024-12-01..{clock.today('America/New_York')}"
    assert f"--start 2024-12-01 {said.format(orders_days, 'orders')}" in orders, orders
    assert f"--start 2024-11-30 {said.format(visits_days, 'visits')}" in earlier, earlier


@pytest.mark.parametrize(
    "argv, said",
    [
        (
            ["rollback", "--asset", "no_such_table", "--start", "2025-01-01", "--end", "2025-01-02", "--version", "1"],
            "unknown asset 'no_such_table'; one of: stg_order_items, dim_product",
        ),
        (
            [
                "rollback",
                "--asset",
                "fact_order_item",
                "--start",
                "2025-01-05",
                "--end",
                "2025-01-02",
                "--version",
                "1",
            ],
            "--start 2025-01-05 is after --end 2025-01-02",
        ),
        (
            [
                "rollback",
                "--asset",
                "fact_order_item",
                "--start",
                "2025-01-01",
                "--end",
                "2025-01-02",
                "--version",
                "-3",
            ],
            "argument --version: not a Delta version (0 or above): '-3'",
        ),
        (
            [
                "rollback",
                "--asset",
                "fact_order_item",
                "--start",
                "2025-01-01",
                "--end",
                "2025-01-02",
                "--version",
                "1",
            ],
            "Delta table 'fact_order_item' does not exist at",
        ),  # a lake with nothing built yet
        (["rollback", "--start", "2025-01-01", "--end", "2025-01-02", "--version", "1"], "--version needs --asset"),
        (
            ["rollback", "--start", "2025-01-01", "--end", "2025-01-02", "--before-run", "no-such-run"],
            "run no-such-run committed nothing in any table",
        ),
        (["release", "--start", "2025-01-05", "--end", "2025-01-02"], "--start 2025-01-05 is after --end 2025-01-02"),
        (
            ["backfill", "--max-partitions-per-run", "0"],
            "argument --max-partitions-per-run: not a whole number above 0: '0'",
        ),
        (["backfill", "--start", "2025-02-01", "--end", "2025-01-01"], "--start 2025-02-01 is after --end 2025-01-01"),
        (["backfill", "--end", "2025-13-01"], "argument --end: not a YYYY-MM-DD date: '2025-13-01'"),
        (["check", "--asset", "nope"], "unknown asset 'nope'"),
        (["check", "--end", "2026-01-01"], "--end 2026-01-01 is outside the partitions 2025-01-01..2025-03-31"),
        (["report", "--asset", "fact_order_item", "--version", "2"], "Delta table 'fact_order_item' does not exist at"),
        (["generate", "--bad-rate", "1.5"], "argument --bad-rate: not a share between 0 and 1: '1.5'"),
        (["generate", "--rows-per-day", "-1"], "argument --rows-per-day: not a whole number above 0: '-1'"),
        (["import-tpch", "--scale", "0"], "argument --scale: not a number above 0: '0'"),
        (["import-tpch", "--through", "1998-02-30"], "argument --through: not a YYYY-MM-DD date: '1998-02-30'"),
        (["no-such-command"], "invalid choice: 'no-such-command'"),
        (["--pipeline", "no_such_module:pipeline", "stale"], "no_such_module:pipeline: no module no_such_module"),
        (["--pipeline", "assets_pkg.pipeline:nope", "stale"], "assets_pkg.pipeline.nope is nothing, not a Pipeline"),
        (["--pipeline", "assets_pkg.pipeline", "stale"], "is not <module>:<attribute>"),
    ],
)
def test_a_mistyped_command_is_one_line_naming_the_mistake_and_exit_2(capsys, argv, said):
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    out = capsys.readouterr()
    assert code == 2
    assert said in out.err and "Traceback" not in out.err + out.out
    assert len(out.err.strip().splitlines()) == 1, out.err


def test_every_commands_help_renders():
    import argparse

    from exact_backfills.cli import build_parser
    from tests.support.orders import ORDERS

    parser = build_parser(ORDERS)
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, command in [("", parser), *commands.items()]:
        assert command.format_help().startswith("usage: "), name  # a stray % in a help text raises here


# What each command needs on the command line at the least.
_RANGE = ["--start", "2025-01-01", "--end", "2025-01-01"]
REQUIRED = {
    "rollback": [*_RANGE, "--before-run", "r"],
    "release": _RANGE,
    "withdraw": ["--file", "f", "--reason", "r"],
    "promote": ["p"],
    "retire": ["--table", "t", "--archive"],
    "engine": ["status"],
}


def test_the_command_line_is_one_table_of_commands_which_the_operators_guide_lists():
    """The parser is built from `commands` alone, in its order, the pipeline's own among them; each command's
    arguments sit beside its handler; each command is a row of docs/operations.md's table of commands."""
    import argparse

    from exact_backfills.cli import build_parser, commands
    from resources.lake import REPO_ROOT
    from tests.support.orders import ORDERS

    table = commands(ORDERS)
    parser = build_parser(ORDERS)
    choices = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert list(choices) == [c.name for c in table]
    machinery = commands()
    assert [c.name for c in table if c not in machinery] == ["import-tpch"]  # the orders pipeline's own
    assert {c.name for c in table if c.within_partitions} == {"backfill", "check", "report", "rollback", "release"}
    for command in machinery:
        args = parser.parse_args([command.name, *REQUIRED.get(command.name, [])])
        assert (args.func, args.within_partitions) == (command.run, command.within_partitions), command.name
    guide = (REPO_ROOT / "docs" / "operations.md").read_text()
    rows = {line.split("`")[1].split()[0] for line in guide.splitlines() if line.startswith("| `")}
    assert [c.name for c in table if c.name not in rows] == []


def test_backfill_of_an_unknown_asset_is_refused(capsys):
    assert main(["backfill", "--select", "no_such_table"]) == 2
    assert "unknown asset(s): no_such_table" in capsys.readouterr().err


@pytest.mark.slow  # lands a history with Spark and observes it in Dagster: 20 s of the quick loop's minute
def test_landing_is_append_only_a_landed_batch_is_never_rewritten(capsys, lake):
    root, _ = lake
    assert main(["generate", "--start", "2025-01-01", "--end", "2025-01-03", "--rows-per-day", "5"]) == 0
    batch = root / "landing" / "order_items" / "ingest_date=2025-01-02"
    files_before = sorted(p.name for p in batch.iterdir())
    assert main(["generate", "--start", "2025-01-01", "--end", "2025-01-03", "--rows-per-day", "5"]) == 2
    assert "batches already landed for" in capsys.readouterr().err
    assert sorted(p.name for p in batch.iterdir()) == files_before


def test_generate_is_deterministic_for_a_seed(spark, tmp_path, monkeypatch):
    from assets_pkg.generate import generate
    from exact_backfills import landing
    from tests.support.orders import ORDER_ITEMS

    def land(root):
        monkeypatch.setenv("LAKE_ROOT", str(root))
        generate(spark, date(2025, 1, 1), date(2025, 1, 4), seed=3, rows_per_day=20, bad_rate=0.1)
        df = landing.read_landing(spark, ORDER_ITEMS).drop("source_file")
        return sorted((r.asDict() for r in df.collect()), key=repr)

    assert land(tmp_path / "a") == land(tmp_path / "b")


@pytest.mark.slow  # starts a JVM in a command's process of its own: 20 s of the quick loop's minute
def test_the_terminal_shows_the_commands_own_lines_and_spark_logs_to_a_file(lake):
    import os
    import subprocess
    import sys

    from resources.lake import REPO_ROOT

    root, _ = lake
    done = subprocess.run(
        [sys.executable, "-m", "assets_pkg", "stale"],
        cwd=REPO_ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "stg_order_items is not materialized" in done.stderr  # the command's own line
    # The JVM's own notice of the vector module Spark enables is printed by Java itself, not by any logger.
    spark_lines = [
        line
        for line in done.stderr.splitlines()
        if line and not line.startswith(("error:", "WARNING: Using incubator"))
    ]
    assert spark_lines == [], done.stderr
    from resources.settings import settings
    from resources.spark import spark_log

    assert " WARN " in spark_log(settings()).read_text()  # what Spark said is kept, in the Spark log


def test_a_command_ends_with_its_code_after_its_threads_and_exit_handlers_without_pythons_finalization(tmp_path):
    """`cli.ending.end` skips Python's finalization (a second of every command) and keeps what a command relies on at
    exit: a thread that is not a daemon finishes, exit handlers run and their output, like the command's own, reaches
    stdout whole, and the exit code is the command's. A finalizer does not run: that is what is skipped."""
    thread_wrote = tmp_path / "thread"
    program = f"""
import atexit, sys, threading, time
from exact_backfills.cli.ending import end

class Finalized:
    def __del__(self):
        print("finalized")

kept = Finalized()
atexit.register(lambda: print("exit handler ran"))
threading.Thread(target=lambda: (time.sleep(0.5), open({str(thread_wrote)!r}, "w").write("done"))).start()
sys.stdout.write("the command's last words, unflushed")
end(3)
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "the command's last words, unflushedexit handler ran\n", done.stdout
    assert thread_wrote.read_text() == "done"
