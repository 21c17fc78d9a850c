"""Range backfills from the command line: chunked runs executed in this process (one Spark session for all of them)
and recorded in the Dagster instance, so they show in the UI like any other run."""

import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import NamedTuple
from urllib.parse import urlencode

from dagster import (
    AssetCheckEvaluation,
    AssetCheckSeverity,
    AssetKey,
    AssetSelection,
    DagsterEvent,
    DagsterEventType,
    DagsterInstance,
    ExecuteInProcessResult,
    JobDefinition,
)

from exact_backfills import estimates, landing, liveness
from exact_backfills.automation import landing_state
from exact_backfills.checks import events_max_days
from exact_backfills.dagster_names import (
    ALL_ASSETS_JOB,
    CLI_BACKFILL_TAG,
    LAKE_WRITES_POOL,
    LANDING_STATE_TAG,
    PLAN_JOB,
    PLAN_OP,
    PREVIEW_JOB,
    PROMOTE_JOB,
    PROMOTE_OP,
    PUBLISHED_PARTLY,
    PUBLISHED_TAG,
    RENAME_JOB,
    RESTATE_JOB,
    ROLLBACK_JOB,
    ROLLBACK_OP,
    VACUUM_JOB,
)
from exact_backfills.dagster_private import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from exact_backfills.declare import Pipeline
from exact_backfills.instance import write_config
from exact_backfills.location import definitions_of
from exact_backfills.partitions import chunks
from exact_backfills.recording import REFUSED
from exact_backfills.rollback import RollbackPlan
from resources.spark import get_spark

# Runs started from the command line print nothing of Dagster's own logging: a command prints the one line that matters
# (see step_failures); each run's full log, stack traces included, is in the Dagster UI.
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def dagster_instance() -> DagsterInstance:
    """The instance in $DAGSTER_HOME (default: .dagster_home in the repo), configured by exact_backfills.instance."""
    write_config()
    return DagsterInstance.get()


def before_writing(instance: DagsterInstance, pipeline: Pipeline, echo: Callable[[str], None]) -> None:
    """Before this process runs a writing step: close the runs whose process is gone, which frees the lake_writes
    slot such a run still holds (otherwise this run would wait for it for good, in silence), and name the live run
    this one will wait for, if any."""
    closed, active = liveness.close_dead_runs(instance, pipeline)
    for run in closed:
        echo(f"  marked failed: {run.describe()} (it held the lake's writes)")
    holders = {slot.run_id for slot in instance.event_log_storage.get_concurrency_info(LAKE_WRITES_POOL).claimed_slots}
    for run in active:
        if run.run.run_id in holders:
            echo(f"  waiting for {run.describe()}: it is writing the lake (pool {LAKE_WRITES_POOL})")


def selected_keys(pipeline: Pipeline, select: list[str] | None) -> list[AssetKey]:
    """The chosen assets and everything downstream of them (all assets when none is chosen)."""
    graph = definitions_of(pipeline).resolve_asset_graph()
    selection = AssetSelection.assets(*select).downstream() if select else AssetSelection.all()
    tables = graph.materializable_asset_keys
    unknown = [name for name in select or [] if AssetKey(name) not in graph.get_all_asset_keys()]
    if unknown:
        raise ValueError(f"unknown asset(s): {', '.join(unknown)}")
    observed = [name for name in select or [] if AssetKey(name) not in tables]
    if observed:
        raise ValueError(f"{', '.join(observed)}: observed, not materialized; backfill the tables that read it")
    return sorted(selection.resolve(graph) & tables, key=lambda k: k.to_user_string())


class StepFailure(NamedTuple):
    step: str
    cause: str  # the project's own account of it, or the root cause
    refused: bool = False  # the machinery refused what was asked: nothing written


def step_failures(result: ExecuteInProcessResult, failed_checks: bool = True) -> list[StepFailure]:
    """(step, root cause) of each failed step of an in-process run: the cause, not Dagster's "error occurred while
    executing op". Without `failed_checks`, steps that failed only because a blocking check failed are left out (a
    checks-only run reports those checks itself)."""
    failures = []
    for event in result.all_events:
        error = event.step_failure_data.error if event.is_step_failure else None
        if error is None or (not failed_checks and _failed_by_its_blocking_checks(result, event)):
            continue
        while error.cause and error.cls_name != "Failure":  # a Failure is the project's own account of it
            error = error.cause
        user = event.step_failure_data.user_failure_data
        refused = bool(user and REFUSED in (user.metadata or {}))
        failures.append(StepFailure(event.step_key or "", said(error.cls_name or "", error.message), refused))
    return failures


def _failed_by_its_blocking_checks(result: ExecuteInProcessResult, failure: DagsterEvent) -> bool:
    """Whether a step failed only because a blocking check of its failed: Dagster fails such a step once its body is
    done, with an error of its own (no failure of the body's, no cause), after the step recorded the failing check."""
    data = failure.step_failure_data
    if data.user_failure_data is not None or data.error is None or data.error.cause is not None:
        return False
    return any(
        not e.passed and e.blocking and e.severity == AssetCheckSeverity.ERROR
        for e in (
            event.asset_check_evaluation_data
            for event in result.all_events
            if event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION and event.step_key == failure.step_key
        )
    )


def refused(result: ExecuteInProcessResult) -> bool:
    """Whether a run that failed was refused by the machinery (nothing written): a command exits 2 for it."""
    return any(f.refused for f in step_failures(result))


@dataclass(frozen=True)
class Backfilled:
    """How a command-line backfill ended: true when every run succeeded; `refused` when one was refused."""

    ok: bool
    refused: bool = False

    def __bool__(self) -> bool:
        return self.ok

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 2 if self.refused else 1


def said(cls_name: str, message: str) -> str:
    """An error's message as the command line prints it: the machinery's own refusal (a Failure) as it says it, any
    other error as its class and first line (the run's log in the UI has the rest)."""
    head, _, rest = message.strip().partition(": ")
    text = rest if head.rpartition(".")[2] == cls_name else message.strip()
    if cls_name == "Failure":
        return text.strip()
    return f"{cls_name}: {text.strip().splitlines()[0] if text.strip() else ''}"


def runs_url(backfill_id: str) -> str:
    """The UI's run list filtered to one command-line backfill's runs. A command-line backfill is not a Dagster
    backfill: Dagster's backfills are executed by its daemon, which launches each run in a process of its own, while
    the command line runs every chunk in this process on one Spark session, so its runs carry CLI_BACKFILL_TAG
    instead."""
    base = os.environ.get("DAGSTER_UI_URL", f"http://127.0.0.1:{os.environ.get('DAGSTER_PORT', '3000')}")
    return f"{base.rstrip('/')}/runs?{urlencode({'q[]': f'tag:{CLI_BACKFILL_TAG}={backfill_id}'})}"


@dataclass(frozen=True)
class BackfillRequest:
    """What a command-line backfill materializes: `select` (every table when None) and everything downstream over
    start..end, in runs of at most `chunk_size` days (default: the landing's), each run tagged with `tags`; with
    `dry_run`, it only says what it would write and read."""

    pipeline: Pipeline
    start: date
    end: date
    select: list[str] | None = None
    chunk_size: int | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    dry_run: bool = False


@dataclass(frozen=True)
class _Runs:
    """A backfill's runs: the job, the assets, and the days of each run."""

    backfill_id: str
    job: JobDefinition
    keys: list[AssetKey]
    ranges: list[tuple[date, date]]


def _runs_of(request: BackfillRequest) -> _Runs:
    pipeline, partitions = request.pipeline, request.pipeline.partitions
    if request.start not in partitions or request.end not in partitions or request.end < request.start:
        within = f"{partitions.first_day}..{partitions.last_day}"
        raise ValueError(f"range {request.start}..{request.end} is not within the partitions {within}")
    keys = selected_keys(pipeline, request.select)
    job = definitions_of(pipeline).resolve_job_def(ALL_ASSETS_JOB)
    ranges = chunks(request.start, request.end, request.chunk_size or landing.days_per_backfill_run(pipeline))
    if max((b - a).days + 1 for a, b in ranges) > events_max_days():
        # Such runs log only failing check results (see checks.events_max_days), so the checks are not planned
        # either: Dagster stores a planned row per check per day.
        job = job.get_subset(asset_selection=set(keys), asset_check_selection=set())
    return _Runs(uuid.uuid4().hex[:8], job, keys, ranges)


def run_backfill(
    request: BackfillRequest, instance: DagsterInstance | None = None, echo: Callable[[str], None] = print
) -> Backfilled:
    """Run `request` in this process; say first what it will write and read and how long it should take (with
    `dry_run`, only that), and at the end what it took."""
    runs = _runs_of(request)
    instance = instance or dagster_instance()
    backfill_id, ranges = runs.backfill_id, runs.ranges
    assets = [k.to_user_string() for k in runs.keys]
    echo(f"backfill {backfill_id}: {request.start}..{request.end}, {len(ranges)} run(s), assets: {', '.join(assets)}")
    estimate = estimates.for_backfill(get_spark(), request.pipeline, instance, ranges, assets)
    for line in estimates.describe(f"backfill {backfill_id}", estimate):
        echo(line)
    if request.dry_run:
        echo("dry run: nothing written")
        return Backfilled(True)
    echo(f"  its runs in the Dagster UI: {runs_url(backfill_id)}")
    before_writing(instance, request.pipeline, echo)
    started = time.monotonic()
    run_ids = []
    for i, (a, b) in enumerate(ranges, 1):
        t0 = time.monotonic()
        result = runs.job.execute_in_process(
            instance=instance,
            asset_selection=None if runs.job.is_subset else runs.keys,
            tags={
                ASSET_PARTITION_RANGE_START_TAG: a.isoformat(),
                ASSET_PARTITION_RANGE_END_TAG: b.isoformat(),
                CLI_BACKFILL_TAG: backfill_id,
                **request.tags,
            },
            raise_on_error=False,
            run_config=QUIET,
        )
        run_ids.append(result.run_id)
        status = "ok" if result.success else "FAILED"
        left = len(ranges) - i
        eta = f", about {(time.monotonic() - started) / i * left:.0f}s to go" if left and result.success else ""
        echo(f"  [{i}/{len(ranges)}] {a}..{b} {status} in {time.monotonic() - t0:.1f}s (run {result.run_id}){eta}")
        if not result.success:
            return _stopped(instance, backfill_id, result, (a, b), echo)
    written = sum(instance.get_run_stats(run_id).materializations for run_id in run_ids)
    measured = estimates.Measured(len(run_ids), written, time.monotonic() - started)
    echo(estimates.describe_measured(f"backfill {backfill_id}", estimate, measured))
    echo(f"backfill {backfill_id} done")
    return Backfilled(True)


def _stopped(
    instance: DagsterInstance,
    backfill_id: str,
    result: ExecuteInProcessResult,
    days: tuple[date, date],
    echo: Callable[[str], None],
) -> Backfilled:
    """A backfill stopped by its failed run over `days`: each failure's cause, and what of those days is published."""
    a, b = days
    failures = step_failures(result)
    for failure in failures:
        echo(f"    {failure.cause}")
    failed = instance.get_run_by_id(result.run_id)
    if failed is not None and failed.tags.get(PUBLISHED_TAG) == PUBLISHED_PARTLY:
        echo(
            f"backfill {backfill_id} stopped: {a}..{b} is published in the tables named above only, days after "
            f"{b} were not run; run the same command again (late_data_sensor also runs {a}..{b} again)"
        )
    else:
        echo(f"backfill {backfill_id} stopped: nothing of {a}..{b} was published, days from {a} on were not run")
    return Backfilled(False, refused=any(f.refused for f in failures))


def run_checks(
    pipeline: Pipeline, start: date, end: date, tables: list[str], instance: DagsterInstance | None = None
) -> tuple[ExecuteInProcessResult, list[AssetCheckEvaluation]]:
    """Every check of `tables` on what is published for start..end, as one checks-only run (what the UI's "Execute
    checks" launches): nothing is written, and each day's results are recorded against its latest materialization.
    Returns the run's result and its check results."""
    defs = definitions_of(pipeline)
    graph = defs.resolve_asset_graph()
    check_keys = {k for k in graph.asset_check_keys if k.asset_key.to_user_string() in tables}
    job = defs.resolve_job_def(ALL_ASSETS_JOB).get_subset(asset_selection=set(), asset_check_selection=check_keys)
    result = job.execute_in_process(
        instance=instance or dagster_instance(),
        tags={ASSET_PARTITION_RANGE_START_TAG: start.isoformat(), ASSET_PARTITION_RANGE_END_TAG: end.isoformat()},
        raise_on_error=False,
        # A failing blocking check fails its step: expected here, and reported by the caller from the results.
        run_config=QUIET,
    )
    evaluations = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    return result, [e for e in evaluations if isinstance(e, AssetCheckEvaluation)]


def run_vacuum(pipeline: Pipeline, instance: DagsterInstance | None = None) -> ExecuteInProcessResult:
    """The vacuum job (what its schedule runs), in this process."""
    job = definitions_of(pipeline).resolve_job_def(VACUUM_JOB)
    return job.execute_in_process(instance=instance or dagster_instance(), raise_on_error=False, run_config=QUIET)


def run_rollback(
    pipeline: Pipeline,
    plan: RollbackPlan,
    instance: DagsterInstance | None = None,
    echo: Callable[[str], None] = print,
) -> ExecuteInProcessResult:
    """The rollback job (what the UI's launchpad runs with the same config), run in this process."""
    config = {
        "start": plan.start.isoformat(),
        "end": plan.end.isoformat(),
        "before_run": plan.before_run or "",
        "before_backfill": plan.before_backfill or "",
        "table": plan.table or "",
        "version": plan.version,
    }
    instance = instance or dagster_instance()
    before_writing(instance, pipeline, echo)
    return (
        definitions_of(pipeline)
        .resolve_job_def(ROLLBACK_JOB)
        .execute_in_process(
            instance=instance,
            raise_on_error=False,
            run_config={**QUIET, "ops": {ROLLBACK_OP: {"config": config}}},
        )
    )


def run_restatement(
    pipeline: Pipeline, instance: DagsterInstance | None = None, echo: Callable[[str], None] = print
) -> ExecuteInProcessResult:
    """What late_data_sensor launches, run in this process (the `restate` command), tagged with the landing state it
    starts from so that the sensor does not launch it again for that state."""
    instance = instance or dagster_instance()
    before_writing(instance, pipeline, echo)
    return (
        definitions_of(pipeline)
        .resolve_job_def(RESTATE_JOB)
        .execute_in_process(
            instance=instance,
            tags={LANDING_STATE_TAG: landing_state(pipeline)},
            raise_on_error=False,
            run_config=QUIET,
        )
    )


def observe_landing(pipeline: Pipeline, instance: DagsterInstance | None = None) -> ExecuteInProcessResult:
    """Observe the landing as a run of the preview job (what the UI's "Observe" button launches), after new batches
    land: every landed day's data version, and the days they make stale, are recorded in Dagster."""
    return (
        definitions_of(pipeline)
        .resolve_job_def(PREVIEW_JOB)
        .execute_in_process(
            instance=instance or dagster_instance(),
            raise_on_error=False,
            run_config=QUIET,
        )
    )


def run_rename(pipeline: Pipeline, instance: DagsterInstance | None = None) -> ExecuteInProcessResult:
    """The rename job, run in this process."""
    instance = instance or dagster_instance()
    before_writing(instance, pipeline, print)
    job = definitions_of(pipeline).resolve_job_def(RENAME_JOB)
    return job.execute_in_process(instance=instance, raise_on_error=False, run_config=QUIET)


def run_plan(
    pipeline: Pipeline, start: date, end: date, select: list[str] | None, instance: DagsterInstance | None = None
) -> ExecuteInProcessResult:
    """The plan job (what the UI's launchpad runs with the same config), run in this process."""
    config = {"start": start.isoformat(), "end": end.isoformat(), "select": select or []}
    return (
        definitions_of(pipeline)
        .resolve_job_def(PLAN_JOB)
        .execute_in_process(
            instance=instance or dagster_instance(),
            raise_on_error=False,
            run_config={**QUIET, "ops": {PLAN_OP: {"config": config}}},
        )
    )


def run_promotion(
    pipeline: Pipeline, plan_id: str, instance: DagsterInstance | None = None, echo: Callable[[str], None] = print
) -> ExecuteInProcessResult:
    """The promotion job, run in this process."""
    instance = instance or dagster_instance()
    before_writing(instance, pipeline, echo)
    return (
        definitions_of(pipeline)
        .resolve_job_def(PROMOTE_JOB)
        .execute_in_process(
            instance=instance,
            raise_on_error=False,
            run_config={**QUIET, "ops": {PROMOTE_OP: {"config": {"plan_id": plan_id}}}},
        )
    )
