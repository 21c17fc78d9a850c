"""The commands of the machine the runs execute on: the active runs and the warm Spark engine."""

import argparse
from typing import TYPE_CHECKING

from exact_backfills.cli.table import Command

if TYPE_CHECKING:
    from exact_backfills.declare import Pipeline


def _runs(pipeline: "Pipeline", args: argparse.Namespace) -> int:
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


def _runs_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--close-dead", action="store_true", help="mark the runs whose process is gone failed")


def _engine(pipeline: "Pipeline", args: argparse.Namespace) -> int:
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


def _engine_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["start", "stop", "status"])


RUNS = Command(
    "runs", "the active runs in the Dagster instance, and whether their process is alive", _runs, _runs_arguments
)
ENGINE = Command(
    "engine",
    "the warm Spark engine every command and run connects to: start it, stop it, or say if it is up",
    _engine,
    _engine_arguments,
)
