"""Late and corrected rows: find exactly the days they change, restate those days in every table, then advance the
watermark. A restatement goes through three named stages: `detect` (Detection: what changed, day by day, table by
table, nothing written), `plan_restatement` (RestatementPlan: the change to publish, the exceptions, the intent) and
`apply_restatement` (Restatement: what was written, through publish.py's one write path).

- The watermark is on the landing's load time (each source's `loaded_at`), never on the event's day: a correction of
  an old event carries an old day. A restatement reads only the batches landed since the watermark minus a trailing
  reprocess window (WATERMARK_REPROCESS_HOURS), plus any batch folder never read before: never the whole history.
  An events source's staging days are then built from what staging holds plus those batches, not from the history.
- What those batches change is decided against what is published: a landed version changes a day only when it beats
  the version staging holds for its key (or, for a rejected row, when quarantine does not hold it yet); a dimension's
  version only when the dimension does not hold it or a newer one. So re-reading a batch, or replaying a tick, finds
  nothing to do; a correction that moves a key to another day changes both days.
- The days a staging table changes make stale, in every table built from it, the days their day dependencies name:
  the same day; the day and the next N-1 for a trailing window of N days; for a dimension read as of the day, the
  days from a new version on whose rows hold its key (dependencies.py).
- Days older than the restatement window (RESTATEMENT_WINDOW_DAYS, counted back from the newest landed batch, not
  from the clock) are not restated: they are recorded in `late_data_exceptions` and fail the
  `late_data_outside_window` check of the staging table until a manual backfill of those days.
- The days are recorded as pending in the watermark row before anything is written, and the watermark advances only
  after every table's write committed: a crash in between leaves them pending, and the next restatement rewrites
  them (reprocessing, never skipped rows).
"""

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from exact_backfills import clock, dependencies, landing, quarantine
from exact_backfills.builds import LandedBatches, latest_versions
from exact_backfills.calendar import Partitions
from exact_backfills.declare import BATCH_COLUMN, VALID_FROM, Pipeline, Staging
from exact_backfills.dependencies import DayChange, DimensionChange
from exact_backfills.publish import (
    Change,
    Operation,
    Publication,
    Rebuilt,
    Restated,
    RowSource,
    RunInfo,
    fault_point,
    publish,
)
from exact_backfills.restatement_days import (
    DaysToRestate,
    batches_to_read,
    classify_days,
    held_landings,
    in_window,
    read_name,
    window_start,
)
from resources import control
from resources.control import LateException
from resources.delta_io import day_filter, read_table, scalar, table_exists
from resources.settings import settings

__all__ = ["DayChange", "Detection", "NothingPublished", "detect", "plan_restatement", "apply_restatement", "restate"]


class NothingPublished(RuntimeError):
    """A staging table is not built yet: what landed is not all published, so nothing is stale."""


def reprocess_window() -> timedelta:
    return timedelta(hours=settings().watermark_reprocess_hours)


def restatement_window_days() -> int:
    return settings().restatement_window_days


@dataclass
class Detection:
    """What the batches landed since the watermark change, day by day and table by table: the first stage of a
    restatement, and the `stale` preview."""

    watermark: control.Watermark
    new_watermark_ts: datetime | None
    batches_read: dict[str, list[str]]  # source -> batches read now
    window_start: date | None
    days: dict[str, dict[date, DayChange]]  # every table, in publish order -> its days to restate, and why
    outside: dict[str, dict[date, DayChange]] = field(default_factory=dict)  # staging table -> days too old: exceptions
    landed: dict[str, LandedBatches] = field(default_factory=dict)  # staging table -> what was read, until unpersist
    refused: list[landing.Refusal] = field(default_factory=list)  # files of the batches read the contract refuses
    held: dict[date, DayChange] = field(default_factory=dict)  # changed days held since a rollback: not restated
    holds: list[control.HeldDay] = field(default_factory=list)  # every open hold: who, when, why
    first_hop: dict[str, dict[date, DayChange]] = field(
        default_factory=dict
    )  # staging table -> what its source changed

    def unpersist(self) -> None:
        for landed in self.landed.values():
            landed.unpersist()

    def days_by_table(self) -> dict[str, list[date]]:
        return {t: sorted(days) for t, days in self.days.items()}

    def change(self, table: str, day: date) -> DayChange:
        return self.days[table][day]

    def landed_days(self, pipeline: Pipeline) -> dict[str, list[date]]:
        """Per source, the days the new batches add rows to (in the window or not)."""
        found = {}
        for source in pipeline.sources:
            table = pipeline.staging[source.name].name
            changes = [*self.first_hop.get(table, {}).items(), *self.outside.get(table, {}).items()]
            found[source.name] = sorted({d for d, c in changes if c.changed or c.quarantined or c.versions})
        return found

    @property
    def exceptions(self) -> list[LateException]:
        """The days too old to restate, as they are recorded."""
        return [
            LateException(table, d, c.rows, ", ".join(sorted(c.batches)), self.window_start)
            for table, days in self.outside.items()
            for d, c in sorted(days.items())
        ]


def _row_id(columns: list[str]) -> Column:
    """Identity of a landed row (nulls included), to find it again in quarantine."""
    return F.sha2(F.to_json(F.struct(*columns), {"ignoreNullFields": "false"}), 256)


@dataclass(frozen=True)
class BatchesRead:
    """The batches of a source a detection reads: `names`, and whether they are every batch landed (`every`)."""

    names: list[str]
    every: bool


def _event_changes(
    spark: SparkSession,
    table: Staging,
    partitions: Partitions,
    batches: BatchesRead,
    days: dict[date, DayChange],
    keep: bool,
) -> tuple[datetime | None, LandedBatches | None]:
    """Add the days an events source's batches change to `days`; return the batches' highest load time, and what was
    read of them when `keep`."""
    source = table.source
    key, columns = list(source.key), source.version_columns
    candidates = landing.read_landing(spark, source, batches.names).persist()
    cached = [candidates]
    try:
        valid, rejected = quarantine.split(source, candidates, partitions)
        new = valid.select(*columns).withColumn("_published", F.lit(False))
        # A correction may carry another day, so the landed keys are looked for in the whole of staging, but in their
        # columns alone: then only the days that hold them are read whole. When every batch is read, every staged key
        # is a landed key: staging is read whole, once. The staged rows of the landed keys are kept for the
        # comparison, the old days and the restatement's staging build. Checkpointed, not cached: Spark recomputes a
        # cached read of a table after every write to that table, and every table the restatement writes after
        # staging is built on these rows, so each write would read staging again.
        keys = new.select(*key).distinct().persist()
        cached.append(keys)
        staging = read_table(spark, table.name)
        if not batches.every:
            day = table.day_column
            holding = [
                r[day] for r in staging.select(*key, day).join(keys, key, "left_semi").select(day).distinct().collect()
            ]
            staging = staging.where(day_filter(day, holding) if holding else F.lit(False))
        staged = source.as_versions(staging.join(keys, key, "left_semi")).localCheckpoint()
        published = staged.withColumn("_published", F.lit(True))
        # The published version wins a tie with an identical landed row: re-reading a batch changes nothing.
        winners = latest_versions(new.unionByName(published), source, key, then=(F.col("_published").desc(),)).where(
            ~F.col("_published")
        )
        old_day = published.select(*key, F.col(source.day).alias("old_day"))
        changed = winners.join(old_day, key, "left").persist()
        cached.append(changed)
        _tally(changed, source.day, "changed", days)
        _tally(changed.where(f"old_day IS NOT NULL AND old_day != {source.day}"), "old_day", "moved_out", days)

        unseen = rejected
        if table_exists(table.quarantine):
            quarantined = source.as_versions(read_table(spark, table.quarantine)).select(_row_id(columns).alias("_id"))
            unseen = rejected.withColumn("_id", _row_id(columns)).join(quarantined, "_id", "left_anti")
        _tally(unseen, quarantine.QUARANTINE_DAY, "quarantined", days)
        landed = LandedBatches(batches.names, candidates, staged) if keep else None
        if landed:
            cached.remove(candidates)
        return scalar(candidates.agg(F.max(source.loaded_at))), landed
    finally:
        for df in cached:
            df.unpersist()


def _tally(rows: DataFrame, day_column: str, counter: str, days: dict[date, DayChange]) -> None:
    """Count `rows` per day into the DayChange `counter`, with the batches they came from."""
    per_day = rows.groupBy(day_column).agg(
        F.count(F.lit(1)).alias("n"), F.collect_set(F.col(BATCH_COLUMN).cast("string")).alias("batches")
    )
    for r in per_day.collect():
        change = days.setdefault(r[day_column], DayChange())
        setattr(change, counter, getattr(change, counter) + r.n)
        change.batches.update(r.batches)


def _dimension_changes(
    spark: SparkSession, table: Staging, partitions: Partitions, batches: list[str], days: dict[date, DayChange]
) -> tuple[datetime | None, DataFrame | None]:
    """Add the days a dimension's batches add a version to (one it does not hold yet, and no newer one of the same day
    either) to `days`; return the batches' highest load time and the new versions (key, valid_from, batch)."""
    if not batches:
        return None, None
    source = table.source
    versions = landing.read_landing(spark, source, batches)
    dated = versions.withColumn(VALID_FROM, landing.event_day(source, partitions))
    if table_exists(table.name):
        known = read_table(spark, table.name).select(
            *[F.col(k).alias(f"_known_{k}") for k in source.key],
            F.col(VALID_FROM).alias("_known_from"),
            F.col(source.newest).alias("_known_at"),
        )
        same = [dated[k] == known[f"_known_{k}"] for k in source.key]
        condition = (dated[VALID_FROM] == known["_known_from"]) & (known["_known_at"] >= dated[source.newest])
        for c in same:
            condition = condition & c
        dated = dated.join(known, condition, "left_anti")
    new = dated.select(*source.key, VALID_FROM, BATCH_COLUMN).persist()
    _tally(new, VALID_FROM, "versions", days)
    return scalar(versions.agg(F.max(source.loaded_at))), new


@dataclass
class _Landed:
    """What the batches read add, before it is decided against the window and the holds."""

    first_hop: dict[str, dict[date, DayChange]] = field(default_factory=dict)  # staging table -> its changed days
    kept: dict[str, LandedBatches] = field(default_factory=dict)  # events staging table -> what was read, kept
    new_versions: dict[str, DataFrame] = field(default_factory=dict)  # dimension -> its new versions
    loaded: list[datetime] = field(default_factory=list)  # each source's newest load time read

    def unpersist(self) -> None:
        for landed_batches in self.kept.values():
            landed_batches.unpersist()


def _refuse_unpublished(pipeline: Pipeline) -> None:
    missing = [t.name for t in pipeline.staging.values() if not table_exists(t.name)]
    if missing:
        more = f" (nor {', '.join(missing[1:])})" if missing[1:] else ""
        raise NothingPublished(
            f"{missing[0]} is not materialized{more}: backfill the tables before restating late data"
        )


def _read_landed(
    spark: SparkSession,
    pipeline: Pipeline,
    batches: dict[str, list[str]],
    landed: dict[str, list[str]],
    keep: bool,
    found: _Landed,
) -> None:
    """Each source's batches read against its staging table, into `found` as they are read (so that a failure can
    unpersist what was kept); `keep`: an events source's read stays cached."""
    for source in pipeline.sources:
        table = pipeline.staging[source.name]
        changed = found.first_hop.setdefault(table.name, {})
        if table.events:
            if not batches[source.name]:
                continue
            read = BatchesRead(batches[source.name], every=batches[source.name] == landed[source.name])
            new_ts, landed_batches = _event_changes(spark, table, pipeline.partitions, read, changed, keep)
            if landed_batches:
                found.kept[table.name] = landed_batches
        else:
            new_ts, versions = _dimension_changes(spark, table, pipeline.partitions, batches[source.name], changed)
            if versions is not None:
                found.new_versions[table.name] = versions
        found.loaded += [new_ts] if new_ts else []


def _days_to_restate(
    spark: SparkSession, pipeline: Pipeline, found: _Landed, start: date | None, wm: control.Watermark
) -> tuple[DaysToRestate, list[control.HeldDay]]:
    """The changed days carried to every table, sorted into restated, too old, and held since a rollback."""
    inside, outside = in_window(found.first_hop, start)
    holds = control.open_holds(spark, pipeline.name)
    held_days = {h.day for h in holds}
    # A day held since a rollback stays as it is in every table, and so do the days built from it: what landed for it
    # is carried nowhere until it is released.
    landed_on_held = held_landings(inside, held_days)
    inside = {t: {d: c for d, c in changes.items() if d not in held_days} for t, changes in inside.items()}
    dimension_changes = {
        t: DimensionChange(v.where(day_filter(VALID_FROM, sorted(inside[t]))))
        for t, v in found.new_versions.items()
        if inside[t]
    }
    stale = dependencies.stale_downstream(spark, pipeline, inside, dimension_changes)
    days = classify_days(stale, outside, wm.pending, held_days)
    return replace(days, held={**days.held, **landed_on_held}), holds


def detect(spark: SparkSession, pipeline: Pipeline, keep_landed: bool = False) -> Detection:
    """What the batches landed since the watermark change, day by day and table by table, without writing anything.
    With `keep_landed`, what it read of each events source's batches stays cached in `landed` until the caller's
    `unpersist`."""
    _refuse_unpublished(pipeline)
    wm = control.read_watermark(spark, pipeline.name)
    landed = {s.name: [landing.batch_name(p) for p in landing.batch_dirs(s)] for s in pipeline.sources}
    batches = {s: batches_to_read(s, names, wm, reprocess_window()) for s, names in landed.items()}
    found = _Landed()
    try:
        _read_landed(spark, pipeline, batches, landed, keep_landed, found)
        start = window_start([b for names in landed.values() for b in names], restatement_window_days())
        days, holds = _days_to_restate(spark, pipeline, found, start, wm)
    except BaseException:
        found.unpersist()
        raise
    finally:
        for versions in found.new_versions.values():
            versions.unpersist()
    watermark_ts = max((t for t in (wm.watermark_ts, *found.loaded) if t is not None), default=None)
    refused = [r for source in pipeline.sources for r in landing.landed_files(source, batches[source.name]).refused]
    return Detection(
        wm,
        watermark_ts,
        batches,
        start,
        {t: days.days.get(t, {}) for t in pipeline.publish_order},
        days.outside,
        found.kept,
        refused,
        days.held,
        holds,
        found.first_hop,
    )


@dataclass
class RestatementPlan:
    """The second stage: what a detection makes the restatement write, before anything is written."""

    detection: Detection
    change: Change
    exceptions: list[LateException]
    pending: dict[str, list[date]]  # each table's days recorded as pending before any write (the intent)
    watermark: control.Watermark  # the watermark once every table's write committed


def plan_restatement(detection: Detection) -> RestatementPlan:
    """Every table's days the batches change; an events source's staging built from what is staged plus its batches
    read (no history scan), or, when none was read (only days left pending, say), from the landing, as a backfill
    builds it."""
    days = {table: stale for table, stale in detection.days_by_table().items() if stale}
    sources: dict[str, RowSource] = {
        t: Restated(detection.landed[t]) if t in detection.landed else Rebuilt() for t in days
    }
    wm = detection.watermark
    pending = {
        t: sorted(set(wm.pending.get(t, [])) | set(days.get(t, []))) for t in sorted(set(wm.pending) | set(days))
    }
    read = {read_name(s, b) for s, batches in detection.batches_read.items() for b in batches}
    advanced = control.Watermark(detection.new_watermark_ts, sorted(set(wm.batches_read) | read), {})
    return RestatementPlan(
        detection, Change(Operation.RESTATEMENT, days, sources), detection.exceptions, pending, advanced
    )


@dataclass
class Restatement:
    """The third stage: what was written."""

    detection: Detection
    publications: dict[str, Publication]  # table -> what was written


def apply_restatement(
    spark: SparkSession,
    pipeline: Pipeline,
    plan: RestatementPlan,
    run: RunInfo,
    before_watermark: Callable[[dict[str, Publication]], None] = lambda publications: None,
) -> Restatement:
    """Record the exceptions, then, when there are days to write, record them as pending and publish them; advance
    the watermark only once every table's write committed. A replayed tick, with nothing new, commits nothing."""
    now = clock.now()
    control.record_exceptions(spark, pipeline.name, plan.exceptions, run.run_id, now)
    wm = plan.detection.watermark
    publications: dict[str, Publication] = {}
    if plan.change.days:
        # Intent first: should anything below fail, these days stay pending and are rewritten next time.
        intent = control.Watermark(wm.watermark_ts, wm.batches_read, plan.pending)
        control.write_watermark(spark, pipeline.name, intent, run.run_id, now)
        publications = publish(spark, pipeline, plan.change, run)
    before_watermark(publications)
    fault_point("before-watermark")
    if plan.change.days or plan.watermark != wm:
        control.write_watermark(spark, pipeline.name, plan.watermark, run.run_id, clock.now())
    return Restatement(plan.detection, publications)


def restate(
    spark: SparkSession,
    pipeline: Pipeline,
    run: RunInfo | None = None,
    on_detection: Callable[[Detection], None] = lambda detection: None,
    on_publication: Callable[[str, Publication], None] = lambda table, publication: None,
    before_watermark: Callable[[], None] = lambda: None,
) -> Restatement:
    """Restate exactly the days the new batches change, in every table (one commit per table), then advance the
    watermark: detect, plan, apply. `on_detection` sees what will be written before anything is; `on_publication`
    each table's publication and `before_watermark` run between the writes and the watermark update (tests inject a
    crash there)."""
    run = run or RunInfo(f"restate-{uuid.uuid4().hex[:12]}")
    detection = detect(spark, pipeline, keep_landed=True)
    try:
        on_detection(detection)

        def then(publications: dict[str, Publication]) -> None:
            for table, publication in publications.items():
                on_publication(table, publication)
            before_watermark()

        return apply_restatement(spark, pipeline, plan_restatement(detection), run, then)
    finally:
        detection.unpersist()
