"""Which runs are alive. A run records the process that executes it (host, pid and the process's start time, so that a
reused pid is not taken for it) as a run tag when a step starts; a run still STARTED whose process is gone is dead,
and is closed with Dagster's `report_run_failed`, saying what was found.

Dagster covers part of this: run monitoring (dagster.yaml) fails runs stuck starting, and the code server that
launched a run marks it failed when the run's process dies. Nothing in Dagster notices when the command line's
process dies (it executes its runs in-process, with no launcher) or when the code server died with its run (the
default run launcher supports no run worker health checks). So guards that wait for a run (the late-data sensor) ask
here first."""

import os
import socket
import time
from dataclasses import dataclass

from dagster import AssetExecutionContext, DagsterInstance, DagsterRun, DagsterRunStatus, OpExecutionContext, RunsFilter

from exact_backfills.dagster_names import PIPELINE_TAG, PROCESS_TAG, PROFILE_TAG, TABLE_DAYS_TAG
from exact_backfills.declare import Pipeline
from resources.settings import settings

ACTIVE = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
]


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat); None when there is none."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def this_process() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


_recorded: set[str] = set()  # runs whose process this process recorded


def record(context: AssetExecutionContext | OpExecutionContext, pipeline: Pipeline) -> None:
    """Record the run's process on the run, once (called where a step starts), with its pipeline, the profile it runs
    on (whose recorded runs estimates.py fits costs from) and the table-days it has published: none yet."""
    run_id = context.run.run_id
    if run_id not in _recorded and context.run.tags.get(PROCESS_TAG) != this_process():
        context.instance.add_run_tags(
            run_id,
            {
                PROCESS_TAG: this_process(),
                PIPELINE_TAG: pipeline.name,
                PROFILE_TAG: settings().profile,
                TABLE_DAYS_TAG: "0",
            },
        )
    _recorded.add(run_id)


def belongs(run: DagsterRun, pipeline: Pipeline) -> bool:
    """Whether a run is the pipeline's: tagged with it (every run of its jobs, and every run once a step starts), or,
    untagged yet, selecting one of its assets. A run of no pipeline known counts as everyone's: guards wait for it."""
    tagged = run.tags.get(PIPELINE_TAG)
    if tagged is not None:
        return tagged == pipeline.name
    selected = {k.to_user_string() for k in run.asset_selection or ()}
    selected |= {k.asset_key.to_user_string() for k in run.asset_check_selection or ()}
    return not selected or bool(selected & {*pipeline.every_table, *pipeline.landing_assets})


@dataclass
class ActiveRun:
    run: DagsterRun
    age_s: float
    process: str | None
    alive: bool | None  # None: not known here (no process recorded yet, or another host's)

    def describe(self) -> str:
        where = f"process {self.process}" if self.process else "no process recorded yet"
        state = {True: "alive", False: "gone", None: "not checked"}[self.alive]
        return (
            f"run {self.run.run_id} ({self.run.job_name}, {self.run.status.value}, {self.age_s:.0f}s): {where}, {state}"
        )


def _alive(process: str) -> bool | None:
    host, pid, started = process.rsplit(":", 2)
    if host != socket.gethostname():
        return None
    return _start_time(int(pid)) == started


def active_runs(instance: DagsterInstance, pipeline: Pipeline | None = None) -> list[ActiveRun]:
    """The runs not finished (the pipeline's, when given)."""
    runs = []
    now = time.time()
    for record in instance.get_run_records(RunsFilter(statuses=ACTIVE)):
        if pipeline is not None and not belongs(record.dagster_run, pipeline):
            continue
        process = record.dagster_run.tags.get(PROCESS_TAG)
        alive = _alive(process) if process and record.dagster_run.status != DagsterRunStatus.QUEUED else None
        since = record.start_time or record.create_timestamp.timestamp()
        runs.append(ActiveRun(record.dagster_run, now - since, process, alive))
    return runs


def close(instance: DagsterInstance, active: ActiveRun) -> None:
    """Mark the run failed, saying why, and free the concurrency slots its dead process held."""
    instance.event_log_storage.free_concurrency_slots_for_run(active.run.run_id)
    instance.report_run_failed(
        active.run,
        message=f"Marked failed: the process that executed this run ({active.process}) is gone, found after "
        f"{active.age_s:.0f}s; its days are repaired by re-running the same range (writes replace whole days).",
    )


def close_dead_runs(
    instance: DagsterInstance, pipeline: Pipeline | None = None
) -> tuple[list[ActiveRun], list[ActiveRun]]:
    """Close every active run whose process is gone; returns (closed, still active): of every pipeline, or, when
    given, the pipeline's (a dead run of another is closed too)."""
    closed, active = [], []
    for run in active_runs(instance):
        if run.alive is False:
            close(instance, run)
            closed.append(run)
        elif pipeline is None or belongs(run.run, pipeline):
            active.append(run)
    return closed, active
