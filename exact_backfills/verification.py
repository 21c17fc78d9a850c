"""Checks on what is published, without writing: what the UI's "Execute" on a check and the `check` command run.
The blocking checks are the ones a change runs before it writes (publish.py); the others compare what is published
with what the pipeline last wrote (audit) and with what has landed since (the late-data detection).

A check that cannot be evaluated (its query fails, the detection it reads fails) fails on every day it covers,
saying why: "passed" only ever means evaluated and passed. What every table's checks share (the late-data
detection, the days stale by code) is found once per run, not once per table."""

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from exact_backfills import checks, clock, code_versions, deadlines, landing, landing_index, late_data, quarantine
from exact_backfills.builds import narrowed
from exact_backfills.declare import Pipeline, Reconcile, Staging
from exact_backfills.dependencies import CodeChange, DayChange, stale_by_code
from exact_backfills.publish import RunInfo
from resources import audit, control
from resources.delta_io import read_days, scan_of_table
from resources.settings import Codegen, settings
from resources.spark import evaluation_for, interpreted


@dataclass
class Reconciled:
    """The reconciliations of a checks-only run whose upstream it checks too (table -> its reconciliation), and the
    measures each upstream's own pass computed for them (table -> day -> measure -> value), filled as the upstream is
    checked: a table's upstream is then not aggregated again for it."""

    within: dict[str, Reconcile] = field(default_factory=dict)
    measures: dict[str, dict[date, dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def of(cls, pipeline: Pipeline, checked: Iterable[str]) -> "Reconciled":
        tables = set(checked)
        return cls(
            {
                t: rec
                for t in tables
                if t in pipeline.by_name
                and (rec := pipeline.by_name[t].reconcile)
                and rec.upstream in tables
                and rec.window_days == 1  # a window's days before are not all among the upstream's checked days
            }
        )


def check_published(
    spark: SparkSession, pipeline: Pipeline, table: str, days: list[date], reconciled: Reconciled | None = None
) -> checks.Verified:
    """The blocking checks on what is published now (the same checks a change runs before writing), with the days'
    profiles; with `reconciled`, the measures of the tables reconciling with this one computed in its pass, and its
    own upstream's taken from the upstream's pass."""
    reconciled = reconciled or Reconciled()
    spec = pipeline.by_name[table]
    df = read_days(spark, table, spec.day_column, days)
    rec = spec.reconcile
    measures = reconciled.measures.get(table)
    upstream = None
    if rec and not measures:
        upstream = read_days(
            spark, rec.upstream, pipeline.day_columns[rec.upstream], checks.reconcile.days_read(rec, days)
        )
    lost = None
    if isinstance(spec, Staging) and spec.events:
        quarantined = read_days(spark, spec.quarantine, pipeline.day_columns[spec.quarantine], days)
        narrow = narrowed(days, pipeline.partitions)
        batches = landing_index.batches_holding(spark, pipeline, spec.source, days) if narrow else None
        lost = quarantine.lost_keys(
            spec.source, landing.read_landing(spark, spec.source, batches), df, quarantined, days
        )
    downstream = {t: r for t, r in reconciled.within.items() if r.upstream == table}
    upstream_day = pipeline.day_columns[rec.upstream] if rec else None
    with _evaluated_for(spark, df, table):
        against = checks.Upstream(upstream, upstream_day, measures)
        verified = checks.evaluate_blocking(df, spec, days, against, lost, downstream)
    reconciled.measures.update(verified.for_downstream)
    return verified


def _evaluated_for(spark: SparkSession, df: DataFrame, table: str) -> AbstractContextManager[None]:
    """How a table's checks are evaluated under SPARK_CODEGEN=auto, as a write reading as much is: interpreted when
    the days read are small, where compiling each query costs more than it saves."""
    if settings().codegen is not Codegen.AUTO or evaluation_for(scan_of_table(df, table).bytes) is Codegen.COMPILED:
        return nullcontext()
    return interpreted(spark)


def stale_code_days(
    spark: SparkSession, pipeline: Pipeline, written: audit.BuiltBy | None = None
) -> dict[str, dict[date, CodeChange]]:
    """Table -> its published days stale by code (built by an older version of its code, or from such a day), from
    the audit trail (`written`, when read already)."""
    written = audit.built_by(spark, pipeline.name) if written is None else written
    return stale_by_code(
        pipeline, {t: written.get(t, {}) for t in pipeline.publish_order}, code_versions.current(pipeline)
    )


def never_built(pipeline: Pipeline, built: Mapping[str, Iterable[date]], through: date) -> dict[str, list[date]]:
    """Table -> the days up to `through` every table it is built from has published and it never has (a table just
    declared, or a backfill that selected only the tables upstream of it), in the partitions in effect. A staging
    table's days are its landing's, which the late-data detection covers."""
    partitions = pipeline.partitions
    found: dict[str, list[date]] = {}
    for table in pipeline.publish_order:
        upstream = list(pipeline.by_name[table].upstream) if table in pipeline.by_name else []
        if not upstream:
            continue
        expected = set.intersection(*(set(built.get(u, ())) for u in upstream))
        missing = sorted(d for d in expected - set(built.get(table, ())) if d in partitions and d <= through)
        if missing:
            found[table] = missing
    return found


def never_built_days(
    spark: SparkSession, pipeline: Pipeline, written: audit.BuiltBy | None = None
) -> dict[str, list[date]]:
    """`never_built`, of what the audit trail (`written`, when read already) says each table has published, up to the
    last closed day: a day still open may be published by some tables only (a day read through a lag is written once
    the daily run publishes it)."""
    assert pipeline.calendar is not None  # refused when declared without one
    through = pipeline.calendar.last_closed_day(clock.now())
    return never_built(pipeline, audit.built_by(spark, pipeline.name) if written is None else written, through)


def code_outcomes(
    pipeline: Pipeline, table: str, days: list[date], stale: dict[date, CodeChange]
) -> list[checks.Outcome]:
    """built_by_current_code on each of `days`: failing, saying why, on the days stale by code."""
    current = code_versions.current(pipeline)[table]
    return [checks.code.published(day, current, stale.get(day)) for day in days]


@dataclass(frozen=True)
class LandingState:
    """What the late-data detection finds of what is published, for every table's checks of a run."""

    stale: dict[str, dict[date, DayChange]] = field(default_factory=dict)  # table -> its days to restate, and why
    outside: dict[str, dict[date, DayChange]] = field(default_factory=dict)  # staging -> days too old to restate
    holds: dict[date, control.HeldDay] = field(default_factory=dict)  # days held since a rollback


@dataclass(frozen=True)
class PublishedState:
    """What the checks of every table in a checks-only run read alike, found once: the late-data detection and the
    days stale by code, each with the error that kept it from being found, if any."""

    landing: LandingState | None
    landing_error: BaseException | None
    code_stale: dict[str, dict[date, CodeChange]] | None
    code_error: BaseException | None
    reconciled: Reconciled = field(default_factory=Reconciled)


def published_state(spark: SparkSession, pipeline: Pipeline, checked: Iterable[str] = ()) -> PublishedState:
    landing_state: LandingState | None = None
    landing_error = code_error = None
    try:
        detection = late_data.detect(spark, pipeline)
        landing_state = LandingState(detection.days, detection.outside, {h.day: h for h in detection.holds})
    except late_data.NothingPublished:  # nothing landed is published yet: nothing is stale
        landing_state = LandingState()
    except Exception as error:
        landing_error = error
    code_stale = None
    try:
        code_stale = stale_code_days(spark, pipeline)
    except Exception as error:
        code_error = error
    return PublishedState(landing_state, landing_error, code_stale, code_error, Reconciled.of(pipeline, checked))


def _guarded(
    covered: list[checks.Check], days: list[date], evaluate: Callable[[], list[checks.Outcome]]
) -> list[checks.Outcome]:
    """The checks `covered` as `evaluate` finds them, or, when it raises, each failed on every day, saying why."""
    try:
        return evaluate()
    except Exception as error:
        return _not_evaluated(covered, days, error)


def _not_evaluated(covered: list[checks.Check], days: list[date], error: BaseException) -> list[checks.Outcome]:
    return [check.not_evaluated(day, error) for check in covered for day in days]


def _content_outcomes(
    spark: SparkSession, pipeline: Pipeline, table: str, days: list[date], run: RunInfo, reconciled: Reconciled
) -> list[checks.Outcome]:
    """The blocking checks and the user's, then the fingerprint and row count against what the pipeline last wrote."""
    verified = check_published(spark, pipeline, table, days, reconciled)
    written = audit.latest_before_run(spark, pipeline.name, run.run_id, days)
    recorded = {day: written[(table, day)] for day in days if (table, day) in written}
    return [*verified.outcomes, *checks.evaluate_published(verified, recorded, days)]


def landing_outcomes(pipeline: Pipeline, table: str, days: list[date], state: LandingState) -> list[checks.Outcome]:
    """Up to date with the landing on each day (why, when not), and late data outside the window for a staging
    table."""
    stale = state.stale.get(table, {})
    outcomes = [
        checks.up_to_date.stale(day, stale[day]) if day in stale else checks.up_to_date.up_to_date(day) for day in days
    ]
    if checks.publishes_late_rows(pipeline.by_name[table]):
        outside = state.outside.get(table, {})
        outcomes += [
            checks.late_data.outside_window(day, outside[day]) if day in outside else checks.late_data.none_late(day)
            for day in days
        ]
    return outcomes


def _held(outcomes: list[checks.Outcome], holds: dict[date, control.HeldDay]) -> list[checks.Outcome]:
    """Held since a rollback: what landed for the day is left out as the operator wants it, until released."""
    return [_held_outcome(o, holds[o.day]) if o.day in holds and o.evaluated else o for o in outcomes]


def _held_outcome(o: checks.Outcome, hold: control.HeldDay) -> checks.Outcome:
    if o.check == checks.UP_TO_DATE:
        return checks.up_to_date.held(o.day, hold.describe())
    if o.check == checks.NOTHING_LOST:
        return checks.nothing_lost.held(o.day, hold.describe(), o)
    return o


def _quarantine_outcomes(spark: SparkSession, pipeline: Pipeline, table: str, days: list[date]) -> list[checks.Outcome]:
    column = pipeline.day_columns[table]
    return _guarded(
        [checks.quarantined.HELD_APART],
        days,
        lambda: checks.quarantine_outcomes(read_days(spark, table, column, days), column, days),
    )


def verify_published(
    spark: SparkSession, pipeline: Pipeline, table: str, days: list[date], run: RunInfo, state: PublishedState
) -> list[checks.Outcome]:
    """Every check of `table` on what is published for `days`, without writing: the blocking checks and the user's;
    the fingerprint and row count against what the pipeline last wrote (a change behind its back fails them); up to
    date with the landing and late data outside the window, from the late-data detection; built by the current code.
    Each group of checks that cannot be evaluated fails on every day, saying why."""
    if table in pipeline.side_table_of:
        return _quarantine_outcomes(spark, pipeline, table, days)
    spec = pipeline.by_name[table]
    apart = (checks.UP_TO_DATE, checks.LATE_DATA, checks.BUILT_BY_CURRENT_CODE)
    content = [c for c in checks.checks_of(spec) if c.name not in apart]
    outcomes = _guarded(content, days, lambda: _content_outcomes(spark, pipeline, table, days, run, state.reconciled))
    landing_checks = [c for c in checks.checks_of(spec) if c.name in (checks.UP_TO_DATE, checks.LATE_DATA)]
    if state.landing is not None:
        outcomes = _held([*outcomes, *landing_outcomes(pipeline, table, days, state.landing)], state.landing.holds)
    else:
        outcomes += _not_evaluated(landing_checks, days, state.landing_error or RuntimeError("not found"))
    if state.code_stale is not None:
        outcomes += code_outcomes(pipeline, table, days, state.code_stale.get(table, {}))
    else:
        error = state.code_error or RuntimeError("not found")
        outcomes += _not_evaluated([checks.code.CURRENT_CODE], days, error)
    return outcomes + deadlines.outcomes(spark, pipeline, table, days)  # failed on every day when it cannot run
