"""A pipeline living its days in front of its UI (`scripts/demo.sh --live`): on a simulated clock, which the UI's
daemon, schedules and sensors follow as they follow the wall clock (exact_backfills/clock.py), each night's batch
lands, the late-data sensor publishes what it brings (its day, and the earlier days its late rows and corrections
touch), the day closes and the daily run publishes it. One night the daemon is down: the batch lands on time, but
nothing runs until the morning after the day's deadline, and the UI shows that day late, day by day.

    python -m exact_backfills.live [--home .live] [--days 14] [--history-days 7] [--late-day 4] [--port 3000]

The pipeline is the one EXACT_BACKFILLS_PIPELINE selects; it needs a demo data generator and a deadline
(`Calendar(publish_by=...)`). Its generated batches wait in an outbox (HOME/outbox), each moved into the lake's landing
whole when its night comes. The lake, the Dagster instance and the clock are HOME's own (a new HOME each time: the
clock only goes forward). After the days the UI keeps serving until Ctrl-C, which stops it and its daemon.

`SimulatedDays` is the driver: the tests' stretches and the bench's move the same clock under the same daemon."""

import argparse
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Protocol

from dagster import DagsterInstance, DagsterRunStatus, RunRecord, RunsFilter

from exact_backfills import clock
from exact_backfills.dagster_names import DAILY_RUN_SCHEDULE, DAILY_RUN_TAG, RESTATE_JOB, VACUUM_SCHEDULE
from exact_backfills.declare import Demo, Pipeline

STARTING = [DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.CANCELING]
FINISHED = (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE)
LOCATION = "exact_backfills"  # workspace.yaml's code location

SCHEDULE = """
query($selector: ScheduleSelector!) {
  scheduleOrError(scheduleSelector: $selector) { ... on Schedule { id scheduleState { status } } }
}"""
STOP_SCHEDULE = "mutation($id: String!) { stopRunningSchedule(id: $id) { __typename } }"
START_SCHEDULE = "mutation($selector: ScheduleSelector!) { startSchedule(scheduleSelector: $selector) { __typename } }"
LOADED = "{ workspaceOrError { ... on Workspace { locationEntries { loadStatus } } } }"


class Ui(Protocol):
    """The UI's GraphQL, as its pages call it."""

    def graphql(self, query: str, variables: dict | None = None) -> dict: ...


class SimulatedDays:
    """Moves the simulated clock under a running UI and daemon (recording in `instance`), and finds the runs its
    schedule and sensors make, as a user's days pass."""

    def __init__(self, ui: Ui, instance: DagsterInstance):
        self.ui, self.instance = ui, instance

    def start(self, timeout: float = 300) -> None:
        """Once the UI has loaded the code location and the scheduler has seen the daily run: it ticks for the closes
        after that. The nightly vacuum is stopped: on a simulated clock it would be another run a day that removes
        nothing (Delta dates files by the wall clock)."""
        deadline = time.monotonic() + timeout
        while not self._loaded():
            assert time.monotonic() < deadline, "the UI did not load the code location"
            time.sleep(1)
        while not any(s.name == DAILY_RUN_SCHEDULE for s in self.instance.all_instigator_state()):
            assert time.monotonic() < deadline, "the scheduler did not see the daily run"
            time.sleep(1)
        self.schedule(VACUUM_SCHEDULE, running=False)

    def _loaded(self) -> bool:
        try:
            entries = self.ui.graphql(LOADED)["workspaceOrError"]["locationEntries"]
        except OSError:  # not listening yet
            return False
        return bool(entries) and all(e["loadStatus"] == "LOADED" for e in entries)

    def move_to(self, instant: datetime) -> None:
        """The clock moves while no run is starting: Dagster fails a run that has been starting for 5 minutes, which
        a jump of hours would make of one. A run queued or under way lives through it as through a slow night."""
        deadline = time.monotonic() + 120
        while self.instance.get_runs_count(RunsFilter(statuses=STARTING)):
            assert time.monotonic() < deadline, "a run is still starting after 2 minutes"
            time.sleep(0.5)
        clock.set_simulated(instant)

    def daily_run_of(self, day: date, finished: bool = True, timeout: float = 180) -> RunRecord:
        """The daily run of `day`, once queued (the scheduler creates it, then submits it to the queue) and, when
        `finished`, once it has finished."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            runs = self.instance.get_run_records(RunsFilter(tags={DAILY_RUN_TAG: day.isoformat()}))
            status = runs[0].dagster_run.status if runs else None
            if status in FINISHED or (not finished and status not in (None, DagsterRunStatus.NOT_STARTED)):
                return runs[0]
            time.sleep(0.5)
        raise TimeoutError(f"no daily run of {day} finished in {timeout:.0f} s")

    def restatements(self) -> int:
        return self.instance.get_runs_count(RunsFilter(job_name=RESTATE_JOB))

    def restatement_after(self, count: int, timeout: float = 180) -> RunRecord:
        """The late-data sensor's next restatement after the first `count`, once it has finished."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            runs = self.instance.get_run_records(RunsFilter(job_name=RESTATE_JOB), ascending=True)
            if len(runs) > count and runs[-1].dagster_run.status in FINISHED:
                return runs[-1]
            time.sleep(0.5)
        raise TimeoutError(f"the late-data sensor restated nothing in {timeout:.0f} s")

    def schedule(self, name: str, running: bool, timeout: float = 60) -> None:
        """Starts or stops a schedule, as its toggle in the UI does; until its state says so a second later (a scheduler
        iteration under way when a schedule stops writes its state back as it read it). A toggle the webserver fails
        (an error of its own, under load) is tried again."""
        selector = {"repositoryLocationName": LOCATION, "repositoryName": "__repository__", "scheduleName": name}
        wanted, failed = ("RUNNING" if running else "STOPPED"), ""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if running:
                    self.ui.graphql(START_SCHEDULE, {"selector": selector})
                else:
                    schedule_id = self.ui.graphql(SCHEDULE, {"selector": selector})["scheduleOrError"]["id"]
                    self.ui.graphql(STOP_SCHEDULE, {"id": schedule_id})
            except (OSError, LiveError) as error:
                failed = f": the webserver said {str(error)[:300]}"
            time.sleep(1.5)
            state = self.ui.graphql(SCHEDULE, {"selector": selector})["scheduleOrError"]["scheduleState"]
            if state["status"] == wanted:
                return
        raise AssertionError(f"{name} is not {wanted} after {timeout:.0f} s{failed}")


@dataclass(frozen=True)
class Outbox:
    """A pipeline's generated demo batches not yet delivered: `landing/<source>/ingest_date=D/` folders under `root`,
    each moved into the lake's landing whole (a rename: the late-data sensor sees all of a batch or none of it)."""

    root: Path

    def generate(self, pipeline: Pipeline, first: date, last: date, rows_per_day: int) -> str:
        """The pipeline's demo data of `first`..`last` (its generator lands where LAKE_ROOT says: here, for now)."""
        from resources.spark import get_spark

        if pipeline.generate is None:
            raise LiveError(f"pipeline {pipeline.name} has no demo data generator: the live demo lands its batches")
        lake = os.environ.get("LAKE_ROOT")
        os.environ["LAKE_ROOT"] = str(self.root)
        try:
            return pipeline.generate(get_spark(), Demo(first, last, seed=7, rows_per_day=rows_per_day, bad_rate=0.0))
        finally:
            _restore("LAKE_ROOT", lake)

    def deliver(self, pipeline: Pipeline, through: date) -> list[str]:
        """Moves every batch of a day up to `through` into the lake's landing; their names."""
        from resources.lake import landing_path

        moved = []
        for source in pipeline.sources:
            waiting = self.root / "landing" / source.name
            for batch in sorted(waiting.glob("ingest_date=*")):
                if date.fromisoformat(batch.name.split("=", 1)[1]) <= through:
                    target = Path(landing_path(source.name)) / batch.name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    batch.rename(target)
                    moved.append(f"{source.name}/{batch.name}")
        return moved


class LiveError(RuntimeError):
    """Why the live demo cannot run: one line."""


def _restore(variable: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(variable, None)
    else:
        os.environ[variable] = value


@dataclass(frozen=True)
class LocalUi:
    """The embedded UI on 127.0.0.1:`port`, with the user and password it keeps in its instance's folder."""

    port: int
    credentials: Path

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        if not self.credentials.exists():
            raise ConnectionRefusedError("the UI has not made its password yet")
        secret = base64.b64encode(self.credentials.read_text().strip().encode()).decode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/graphql",
            data=json.dumps({"query": query, "variables": variables or {}}).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Basic {secret}"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            body = json.load(response)
        if "errors" in body:
            raise LiveError(f"the UI refused a query: {body['errors'][0].get('message')}")
        return body["data"]


@dataclass(frozen=True)
class Plan:
    """The days the live demo lives: the history before `first_live_day`, built before the UI starts, then `days`
    days, the `late`-th (1-based; 0: none) the night the daemon is down."""

    first_day: date
    first_live_day: date
    days: int
    late: int

    @property
    def live_days(self) -> list[date]:
        return [self.first_live_day + timedelta(days=n) for n in range(self.days)]

    def is_late(self, day: date) -> bool:
        return self.late > 0 and day == self.first_live_day + timedelta(days=self.late - 1)


def live(
    pipeline: Pipeline, plan: Plan, driver: SimulatedDays, outbox: Outbox, say: Callable[[str], None] = print
) -> list[date]:
    """Each day of `plan`: its night's batch lands, the sensor publishes it, the day closes and the daily run
    publishes it (on the late day, nothing runs from its end until an hour past its deadline). The days published
    late, as the deadline check says."""
    calendar = pipeline.calendar
    assert calendar is not None and calendar.publish_by is not None
    for day in plan.live_days:
        night = day + timedelta(days=1)
        before = driver.restatements()
        if plan.is_late(day):
            deadline = calendar.deadline(day)
            assert deadline is not None
            # The daemon is down: the batch lands at its time, but nothing runs until an hour past the deadline
            driver.move_to(deadline + timedelta(hours=1))
            outbox.deliver(pipeline, through=night)
            daily = driver.daily_run_of(day)  # the scheduler's tick at the close, caught up
            driver.restatement_after(before)
        else:
            # The night's batch lands three quarters of the way from the day's end to its close
            driver.move_to(clock.end_of(day, calendar.timezone) + calendar.closes_after * 3 / 4)
            outbox.deliver(pipeline, through=night)
            restated = driver.restatement_after(before)
            driver.move_to(calendar.closes_at(day) + timedelta(minutes=1))
            daily = driver.daily_run_of(day)
            if restated.dagster_run.status != DagsterRunStatus.SUCCESS:
                say(f"{day}: the late-data sensor's restatement failed (run {restated.dagster_run.run_id})")
        status = daily.dagster_run.status.value.lower()
        say(f"{day}: published by its daily run ({status}){' late: the daemon was down' if plan.is_late(day) else ''}")
    return _missed(pipeline, plan)


def _missed(pipeline: Pipeline, plan: Plan) -> list[date]:
    from exact_backfills import deadlines
    from resources.spark import get_spark

    spark = get_spark()
    late: set[date] = set()
    for table in pipeline.publish_order:
        late |= {o.day for o in deadlines.outcomes(spark, pipeline, table, plan.live_days) if not o.passed}
    return sorted(late)


# The marker of a folder the live demo made: the only kind it empties before a new start.
MADE_HERE = ".live-demo"


def _new_home(home: Path) -> None:
    """`home`, empty: made new, or emptied when an earlier live demo made it (its clock only goes forward)."""
    if home.exists() and any(home.iterdir()):
        if not (home / MADE_HERE).exists():
            raise LiveError(f"{home} holds files the live demo did not make: give --home a new or earlier live folder")
        shutil.rmtree(home)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    (home / MADE_HERE).touch()


def _serve(home: Path, port: int, workspace: Path) -> subprocess.Popen:
    """The embedded UI and its daemon (exact_backfills/ui_server.py), in a process group of their own, able to stop on
    SIGTERM even when started from a process that ignores SIGINT (STOPPABLE)."""
    from resources.engine import STOPPABLE

    listen = ["--listen", f"127.0.0.1:{port}", str(workspace)]
    return subprocess.Popen(
        [*STOPPABLE, sys.executable, "-m", "exact_backfills.ui_server", *listen],
        cwd=os.environ["DAGSTER_HOME"],
        start_new_session=True,
    )


def _stop(ui: subprocess.Popen) -> None:
    """The UI's whole group: asked to stop, then whatever of it is left (a code server, a run) killed."""
    try:
        os.killpg(ui.pid, signal.SIGTERM)
        ui.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return
    try:
        os.killpg(ui.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    ui.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", default=".live", help="the live demo's folder, new or an earlier one's [.live]")
    parser.add_argument("--days", type=int, default=14, help="days lived after the history [14]")
    parser.add_argument("--history-days", type=int, default=7, help="days built before the UI starts [7]")
    parser.add_argument("--late-day", type=int, default=4, help="which live day the daemon is down for (0: none) [4]")
    parser.add_argument("--rows-per-day", type=int, default=40, help="the generator's rows a day [40]")
    parser.add_argument("--port", type=int, default=int(os.environ.get("DAGSTER_PORT", "3000")))
    parser.add_argument("--exit", action="store_true", help="stop the UI after the days instead of serving on")
    args = parser.parse_args(argv)
    if args.days < 1 or args.history_days < 1 or not 0 <= args.late_day <= args.days:
        parser.error("--days and --history-days at least 1; --late-day from 0 to --days")
    # Stopped as a whole (its process group), it stops the UI it started in a group of the UI's own.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        return _live(args)
    except (LiveError, TimeoutError) as refused:
        print(f"live: {refused}", file=sys.stderr)
        return 1


def _live(args: argparse.Namespace) -> int:
    from exact_backfills import pipelines
    from exact_backfills.instance import write_config
    from resources.lake import REPO_ROOT

    home = Path(args.home).resolve()
    _new_home(home)
    os.environ.update(
        {
            "LAKE_ROOT": str(home / "lake"),
            "DAGSTER_HOME": str(home / "dagster_home"),
            clock.SIMULATED_CLOCK: str(home / "clock"),
            "PARTITION_END_DATE": "",  # the calendar's open end: the simulated today
        }
    )
    pipeline = pipelines.selected()
    calendar = pipeline.calendar
    if calendar is None or calendar.publish_by is None:
        raise LiveError(f"pipeline {pipeline.name} declares no deadline: Calendar(..., publish_by=timedelta(hours=6))")
    first = pipeline.partitions.first_day
    plan = Plan(first, first + timedelta(days=args.history_days), args.days, args.late_day)
    # The clock: just after the history's last day closed
    clock.set_simulated(calendar.closes_at(plan.first_live_day - timedelta(days=1)) + timedelta(minutes=1))
    outbox = Outbox(home / "outbox")
    last = plan.live_days[-1]
    print(f"live: {outbox.generate(pipeline, first, last, args.rows_per_day)}", flush=True)
    outbox.deliver(pipeline, through=plan.first_live_day - timedelta(days=1))
    history = [str(first), str(plan.first_live_day - timedelta(days=1))]
    write_config(home / "dagster_home")
    built = subprocess.run(
        [sys.executable, "-m", "exact_backfills", "backfill", "--start", history[0], "--end", history[1]]
    )
    if built.returncode != 0:
        raise LiveError(f"the history's backfill ({history[0]}..{history[1]}) failed: see above")
    ui = _serve(home, args.port, REPO_ROOT / "workspace.yaml")
    try:
        with DagsterInstance.get() as instance:
            from exact_backfills.ui_server import CREDENTIALS_FILE

            driver = SimulatedDays(LocalUi(args.port, home / "dagster_home" / CREDENTIALS_FILE), instance)
            driver.start()
            print(f"live: {plan.days} days from {plan.first_live_day}, a day as fast as its runs go", flush=True)
            late = live(pipeline, plan, driver, outbox, say=lambda line: print(f"live: {line}", flush=True))
        shown = ", ".join(map(str, late)) or "none"
        print(f"live: {plan.days} days lived; published after their deadline: {shown}", flush=True)
        if args.exit:
            return 0
        print(f"live: the UI keeps serving on http://127.0.0.1:{args.port}; Ctrl-C stops it", flush=True)
        ui.wait()
        return 0
    finally:
        _stop(ui)


if __name__ == "__main__":
    sys.exit(main())
