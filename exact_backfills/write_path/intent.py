"""The watermark's intent: for a backfill or a release, the days built from the days it changes that it does not
write itself (a trailing window's later days, say) are recorded as pending in the watermark before its first commit,
for the next restatement; once every table is committed, the pending days it wrote are pending no more. A rollback or
a release carries such days into itself instead (`carried_through`, `with_carried`)."""

from dataclasses import replace
from datetime import date

from pyspark.sql import SparkSession

from exact_backfills import checks, clock, dependencies
from exact_backfills.declare import Pipeline
from exact_backfills.write_path.changes import Change, Operation, day_ranges
from exact_backfills.write_path.context import Writing
from resources import audit, control


def intend(w: Writing) -> None:
    """The days the change leaves stale, recorded pending first: so even if a commit below fails."""
    w.left_stale = _left_stale(w.spark, w.pipeline, w.change, w.verified, w.previous_content)
    wm = control.read_watermark(w.spark, w.pipeline.name) if w.change.operation in _FROM_THE_LANDING else None
    if wm is not None and any(w.left_stale.values()):
        every = _merged(wm.pending, *w.left_stale.values())
        wm = replace(wm, pending=every)
        control.write_watermark(w.spark, w.pipeline.name, wm, w.run.run_id, clock.now())
    w.watermark = wm


def settle_pending(w: Writing) -> None:
    """Once every table is committed: the pending days the change wrote, built now from what is published, are no
    longer stale."""
    wm, days = w.watermark, w.change.days
    if wm is not None and _overlap(wm.pending, days):
        rest = {t: [d for d in pending if d not in days.get(t, [])] for t, pending in wm.pending.items()}
        wm = replace(wm, pending={t: pending for t, pending in rest.items() if pending})
        control.write_watermark(w.spark, w.pipeline.name, wm, w.run.run_id, clock.now())
        w.watermark = wm


# The operations whose rows are built from the landing and what is published: the days they change leave the days
# built from them, outside the change, stale. (A restatement carries its change through every table itself; a
# promotion's plan diffs every day built from the days it changes; a rollback's days are held.)
_FROM_THE_LANDING = (Operation.BACKFILL, Operation.RELEASE)


def _left_stale(
    spark: SparkSession,
    pipeline: Pipeline,
    change: Change,
    verified: dict[str, checks.Verified],
    previous_content: dict[tuple[str, date], audit.DayContent],
) -> dict[str, dict[str, set[date]]]:
    """Per table of the change: the published days of the tables built from it that its changed days leave stale
    outside the change (a trailing window's later days, say). A day whose content changed is one whose fingerprint
    did, or one that had no rows and has some now."""
    if change.operation not in _FROM_THE_LANDING:
        return {}
    found: dict[str, dict[str, set[date]]] = {}
    for table in change.tables():
        changed = []
        for day in change.days[table]:
            now, before = verified[table].profile(day).content, previous_content.get((table, day))
            if checks.fingerprint_changed(now, before) or (now.rows > 0 and (before is None or not before.rows)):
                changed.append(day)
        last_day = pipeline.partitions.last_day
        stale = dependencies.left_stale(pipeline, {table: changed}, change.days, last_day) if changed else {}
        if stale:
            found[table] = stale
    if found:  # only the days published: a day never written is built when it is
        published = audit.built_by(spark, pipeline.name)
        found = {
            table: {t: kept for t, days in stale.items() if (kept := days & set(published.get(t, {})))}
            for table, stale in found.items()
        }
    return {table: stale for table, stale in found.items() if stale}


def carried_through(
    spark: SparkSession, pipeline: Pipeline, changed: dict[str, list[date]], written: dict[str, list[date]]
) -> dict[str, list[date]]:
    """Table -> the published days beyond `written` that a rollback or a release rebuilds in the same change, since
    they are built from its `changed` days through a day dependency (a trailing window's later days, say), leaving out
    days held since a rollback."""
    published = audit.built_by(spark, pipeline.name)
    held = {h.day for h in control.open_holds(spark, pipeline.name)}
    return dependencies.carried_beyond(pipeline, changed, written, pipeline.partitions.last_day, published, held)


def carried_days(carried: dict[str, list[date]]) -> str:
    """The days a change rebuilds beyond its range, as a line says them."""
    tables = ", ".join(f"{t} on {day_ranges(days)}" for t, days in carried.items())
    return f"{tables} (built from its days through a day dependency)"


def with_carried(change: Change, carried: dict[str, list[date]]) -> Change:
    """`change` also writing the days `carried` names."""
    tables = [*change.days, *(t for t in carried if t not in change.days)]
    days = {t: sorted(set(change.days.get(t, [])) | set(carried.get(t, []))) for t in tables}
    return replace(change, days=days)


def _merged(pending: dict[str, list[date]], *more: dict[str, set[date]]) -> dict[str, list[date]]:
    merged = {t: set(days) for t, days in pending.items()}
    for stale in more:
        for t, days in stale.items():
            merged.setdefault(t, set()).update(days)
    return {t: sorted(days) for t, days in merged.items()}


def _overlap(pending: dict[str, list[date]], days: dict[str, list[date]]) -> bool:
    return any(set(pending_days) & set(days.get(t, [])) for t, pending_days in pending.items())
