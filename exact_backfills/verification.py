"""Checks on what is published, without writing: what the UI's "Execute" on a check and the `check` command run.
The blocking checks are the ones a change runs before it writes (publish.py); the others compare what is published
with what the pipeline last wrote (audit) and with what has landed since (the late-data detection)."""

from datetime import date

from pyspark.sql import SparkSession

from exact_backfills import checks, code_versions, landing, late_data, quarantine
from exact_backfills.declare import Pipeline, Staging
from exact_backfills.dependencies import CodeChange, stale_by_code
from exact_backfills.publish import RunInfo
from resources import audit, control
from resources.delta_io import read_days


def check_published(spark: SparkSession, pipeline: Pipeline, table: str, days: list[date]) -> checks.Verified:
    """The blocking checks on what is published now (the same checks a change runs before writing), with the days'
    profiles."""
    spec = pipeline.by_name[table]
    df = read_days(spark, table, spec.day_column, days)
    rec = spec.reconcile
    upstream = read_days(spark, rec.upstream, pipeline.day_column[rec.upstream], days) if rec else None
    lost = None
    if isinstance(spec, Staging) and spec.events:
        quarantined = read_days(spark, spec.quarantine, pipeline.day_column[spec.quarantine], days)
        lost = quarantine.lost_keys(spec.source, landing.read_landing(spark, spec.source), df, quarantined, days)
    return checks.evaluate_blocking(df, upstream, lost, spec, days, pipeline.day_column[rec.upstream] if rec else None)


def stale_code_days(spark: SparkSession, pipeline: Pipeline) -> dict[str, dict[date, CodeChange]]:
    """Table -> its published days stale by code (built by an older version of its code, or from such a day)."""
    written = audit.built_by(spark, pipeline.name)
    return stale_by_code(
        pipeline, {t: written.get(t, {}) for t in pipeline.publish_order}, code_versions.current(pipeline)
    )


def code_outcomes(
    pipeline: Pipeline, table: str, days: list[date], stale: dict[date, CodeChange]
) -> list[checks.Outcome]:
    """built_by_current_code on each of `days`: failing, saying why, on the days stale by code."""
    current = code_versions.current(pipeline)[table]
    return [
        checks.Outcome(
            checks.BUILT_BY_CURRENT_CODE,
            day,
            day not in stale,
            {"current_code_version": current, **({"why": stale[day].describe()} if day in stale else {})},
        )
        for day in days
    ]


def verify_published(
    spark: SparkSession, pipeline: Pipeline, table: str, days: list[date], run: RunInfo
) -> list[checks.Outcome]:
    """Every check of `table` on what is published for `days`, without writing: the blocking checks and the user's;
    the fingerprint and row count against what the pipeline last wrote (a change behind its back fails them); up to
    date with the landing and late data outside the window, from the late-data detection."""
    verified = check_published(spark, pipeline, table, days)
    written = audit.latest_before_run(spark, pipeline.name, run.run_id, days)
    recorded = {day: written[(table, day)] for day in days if (table, day) in written}
    holds: dict[date, control.HeldDay] = {}
    try:
        detection = late_data.detect(spark, pipeline)
        stale, outside = set(detection.days_by_table()[table]), set(detection.outside.get(table, {}))
        holds = {h.day: h for h in detection.holds if h.day in set(days)}
    except late_data.NothingPublished:  # nothing landed is published yet: nothing is stale
        stale, outside = set(), set()
    outcomes = [*verified.outcomes, *checks.evaluate_published(verified, recorded, days, stale)]
    outcomes += code_outcomes(pipeline, table, days, stale_code_days(spark, pipeline)[table])
    for o in outcomes:
        # Held since a rollback: what landed for the day is left out as the operator wants it, until released.
        if o.check in (checks.UP_TO_DATE, checks.NOTHING_LOST) and o.day in holds:
            o.passed = True
            o.metadata.update({"held": True, "why": holds[o.day].describe()})
    if checks.publishes_late_rows(pipeline.by_name[table]):
        late = {e.day for e in control.open_exceptions(spark, pipeline.name, days, table)} | outside
        outcomes += [
            checks.Outcome(checks.LATE_DATA, day, day not in late, {"late_rows_unpublished": day in late})
            for day in days
        ]
    return outcomes
