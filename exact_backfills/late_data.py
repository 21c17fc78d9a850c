"""Late and corrected rows: find exactly the days they change, restate those days in every table, then advance the
watermark. A restatement goes through three named stages: `detect` (Detection: what changed, day by day, nothing
written), `plan_restatement` (RestatementPlan: the change to publish, the exceptions, the intent) and
`apply_restatement` (Restatement: what was written, through publish.py's one write path).

- The watermark is on the landing's load time (`ingested_at`), never on the event date: a correction of an old order
  carries an old order_date. A restatement reads only the batches landed since the watermark minus a trailing
  reprocess window (WATERMARK_REPROCESS_HOURS), plus any batch folder never read before: never the whole history.
  Staging's days are then built from what staging holds plus those batches, not from the landing's history.
- What those batches change is decided against what is published: a landed version changes a day only when it
  beats the version staging holds for its key (or, for a rejected row, when quarantine does not hold it yet). So
  re-reading a batch, or replaying a tick, finds nothing to do; a correction that moves an item to another day
  changes both days.
- Days older than the restatement window (RESTATEMENT_WINDOW_DAYS, counted back from the newest landed batch, not
  from the clock) are not restated: they are recorded in `late_data_exceptions` and fail the
  `late_data_outside_window` check until a manual backfill of those days.
- The days are recorded as pending in the watermark row before anything is written, and the watermark advances only
  after every table's write committed: a crash in between leaves them pending, and the next restatement rewrites
  them (reprocessing, never skipped rows).
"""

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from assets_pkg import transforms
from assets_pkg.tables import BY_NAME, PUBLISH_ORDER, LandedBatches, Role, built_from_landing
from exact_backfills import landing, quarantine
from exact_backfills.landing import ORDER_ITEM_KEY, ORDER_ITEM_SCHEMA, ORDER_ITEM_VERSION_COLUMNS
from exact_backfills.partitions import first_day, last_day
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
from resources import control
from resources.delta_io import day_filter, read_table, scalar, table_exists
from resources.settings import settings

PIPELINE = "order_items"

# Where each landing dataset's batches first reach the lake, and staging's quarantine.
STAGING = built_from_landing(landing.ORDER_ITEMS)
DIMENSION = built_from_landing(landing.PRODUCTS)
QUARANTINE = STAGING.side_tables[0].name


class NothingPublished(RuntimeError):
    """Staging is not built yet: nothing landed is published, so nothing is stale."""


def reprocess_window() -> timedelta:
    return timedelta(hours=settings().watermark_reprocess_hours)


def restatement_window_days() -> int:
    return settings().restatement_window_days


@dataclass
class DayChange:
    """Why a day is stale: keys whose current version is new on it (added or corrected), keys that moved away from
    it, rows landed for it that break the contract, product versions taking effect on it, and the batches."""

    changed: int = 0
    moved_out: int = 0
    quarantined: int = 0
    product_versions: int = 0
    changed_products: int = 0  # products ordered that day whose new version applies to it (per batch)
    batches: set[str] = field(default_factory=set)
    pending: bool = False  # left by an interrupted restatement

    def plus(self, other: "DayChange") -> "DayChange":
        """Both changes of a day (its order items' and its product versions')."""
        counters = ("changed", "moved_out", "quarantined", "product_versions", "changed_products")
        return DayChange(
            **{c: getattr(self, c) + getattr(other, c) for c in counters},
            batches=self.batches | other.batches,
            pending=self.pending or other.pending,
        )

    def describe(self) -> str:
        parts = [
            f"{self.changed} key(s) added or corrected" if self.changed else "",
            f"{self.moved_out} key(s) moved to another day" if self.moved_out else "",
            f"{self.quarantined} row(s) to quarantine" if self.quarantined else "",
            f"{self.product_versions} product version(s) taking effect" if self.product_versions else "",
            f"{self.changed_products} ordered product(s) changed" if self.changed_products else "",
            "pending from an interrupted restatement" if self.pending else "",
        ]
        text = ", ".join(p for p in parts if p)
        return text + (f" (batches {', '.join(sorted(self.batches))})" if self.batches else "")


@dataclass
class Detection:
    """What the batches landed since the watermark change, day by day: the first stage of a restatement, and the
    `stale` preview."""

    watermark: control.Watermark
    new_watermark_ts: datetime | None
    batches_read: dict[str, list[str]]  # dataset -> batches read now
    window_start: date | None
    order_days: dict[date, DayChange]  # days of the order tables to restate
    product_days: dict[date, DayChange]  # days of the dimension to restate
    outside: dict[date, DayChange]  # older than the window: exceptions, not restated
    landed: LandedBatches | None = None  # kept only when asked for (a restatement), until `unpersist`
    refused: list[landing.Refusal] = field(default_factory=list)  # files of the batches read the contract refuses
    held: dict[date, DayChange] = field(default_factory=dict)  # changed days held since a rollback: not restated
    holds: list[control.HeldDay] = field(default_factory=list)  # every open hold: who, when, why

    def unpersist(self) -> None:
        if self.landed:
            self.landed.unpersist()

    def _days(self, table: str) -> dict[date, DayChange]:
        # A dimension's days are the days its versions take effect; every other table is by order day.
        return self.product_days if BY_NAME[table].role is Role.DIMENSION else self.order_days

    def days_by_table(self) -> dict[str, list[date]]:
        return {t: sorted(self._days(t)) for t in PUBLISH_ORDER}

    def change(self, table: str, day: date) -> DayChange:
        return self._days(table)[day]

    def landed_days(self) -> dict[str, list[date]]:
        """Per landing dataset, the days the new batches add rows to (in the window or not)."""
        changes = [*self.order_days.items(), *self.product_days.items(), *self.outside.items()]
        return {
            landing.ORDER_ITEMS: sorted({d for d, c in changes if c.changed or c.quarantined}),
            landing.PRODUCTS: sorted({d for d, c in changes if c.product_versions}),
        }


# The day decisions, pure: which batches to read, where the restatement window starts, which changed days are
# restated, which are too old to be, which are held.


def batches_to_read(landed: list[str], wm: control.Watermark, reprocess: timedelta) -> list[str]:
    """The landed batches a restatement reads: every one never read, and the ones landed since the watermark minus
    the reprocess window."""
    since = (wm.watermark_ts - reprocess).date() if wm.watermark_ts else None
    seen = set(wm.batches_read)
    return [b for b in landed if b not in seen or (since is not None and date.fromisoformat(b) >= since)]


def window_start(landed: list[str], window_days: int) -> date | None:
    """The first day a restatement rewrites: the window counts back from the newest landed batch, not the clock."""
    return date.fromisoformat(max(landed)) - timedelta(days=window_days) if landed else None


@dataclass
class DaysToRestate:
    order_days: dict[date, DayChange]
    product_days: dict[date, DayChange]
    outside: dict[date, DayChange]  # older than the window (and not pending): late-data exceptions
    held: dict[date, DayChange]  # held since a rollback: left as they are


def _merge(into: dict[date, DayChange], day: date, change: DayChange) -> None:
    into[day] = into[day].plus(change) if day in into else change


def classify_days(
    order_days: dict[date, DayChange],
    product_days: dict[date, DayChange],
    pending: list[date],
    start: date | None,
    held_days: set[date],
) -> DaysToRestate:
    """Sort the days batches change: a day left pending by an interrupted restatement is rewritten again whatever its
    age; a day older than the window becomes an exception; a day held since a rollback is left as it is."""
    order, product = dict(order_days), dict(product_days)
    for day in pending:
        order[day] = replace(order.get(day, DayChange()), pending=True)
    outside: dict[date, DayChange] = {}
    if start:
        for days in (order, product):
            for day in [d for d in days if d < start and not days[d].pending]:
                _merge(outside, day, days.pop(day))
    held: dict[date, DayChange] = {}
    for days in (order, product, outside):
        for day in [d for d in days if d in held_days]:
            _merge(held, day, days.pop(day))
    return DaysToRestate(order, product, outside, held)


def _row_id(columns: list[str]) -> Column:
    """Identity of a landed row (nulls included), to find it again in quarantine."""
    return F.sha2(F.to_json(F.struct(*columns), {"ignoreNullFields": "false"}), 256)


def _order_item_changes(
    spark: SparkSession, batches: list[str], every_batch: bool, days: dict[date, DayChange], keep: bool
) -> tuple[datetime | None, LandedBatches | None]:
    """Add the days the order item batches change to `days` (`every_batch`: they are every batch landed); return the
    batches' highest load time, and what was read of them when `keep`."""
    candidates = landing.read_landing(spark, landing.ORDER_ITEMS, batches).persist()
    cached = [candidates]
    try:
        valid, rejected = quarantine.split(candidates, first_day(), last_day())
        new = valid.select(*ORDER_ITEM_VERSION_COLUMNS).withColumn("_published", F.lit(False))
        # A correction may carry another order date, so the landed keys are looked for in the whole of staging, but
        # in their columns alone: then only the days that hold them are read whole. When every batch is read, every
        # staged key is a landed key: staging is read whole, once. The staged rows of the landed keys are kept for
        # the comparison, the old days and the restatement's staging build. Checkpointed, not cached: Spark
        # recomputes a cached read of a table after every write to that table, and every table the restatement
        # writes after staging is built on these rows, so each write would read staging again.
        keys = new.select(*ORDER_ITEM_KEY).distinct().persist()
        cached.append(keys)
        staging = read_table(spark, STAGING.name)
        if not every_batch:
            day = STAGING.day_column
            holding = [
                r[day]
                for r in staging.select(*ORDER_ITEM_KEY, day)
                .join(keys, ORDER_ITEM_KEY, "left_semi")
                .select(day)
                .distinct()
                .collect()
            ]
            staging = staging.where(day_filter(day, holding) if holding else F.lit(False))
        staged = staging.join(keys, ORDER_ITEM_KEY, "left_semi").select(*ORDER_ITEM_VERSION_COLUMNS).localCheckpoint()
        published = staged.withColumn("_published", F.lit(True))
        # The published version wins a tie with an identical landed row: re-reading a batch changes nothing.
        winners = transforms.latest_versions(
            new.unionByName(published),
            ORDER_ITEM_KEY,
            ORDER_ITEM_SCHEMA.fieldNames(),
            then=(F.col("_published").desc(),),
        ).where(~F.col("_published"))
        old_day = published.select(*ORDER_ITEM_KEY, F.col("order_date").alias("old_day"))
        changed = winners.join(old_day, ORDER_ITEM_KEY, "left").persist()
        cached.append(changed)
        _tally(changed, "order_date", "changed", days)
        _tally(changed.where("old_day IS NOT NULL AND old_day != order_date"), "old_day", "moved_out", days)

        unseen = rejected
        if table_exists(QUARANTINE):
            quarantined = read_table(spark, QUARANTINE).select(_row_id(ORDER_ITEM_VERSION_COLUMNS).alias("_id"))
            unseen = rejected.withColumn("_id", _row_id(ORDER_ITEM_VERSION_COLUMNS)).join(
                quarantined, "_id", "left_anti"
            )
        _tally(unseen, "quarantine_day", "quarantined", days)
        landed = LandedBatches(batches, candidates, staged) if keep else None
        if landed:
            cached.remove(candidates)
        return scalar(candidates.agg(F.max("ingested_at"))), landed
    finally:
        for df in cached:
            df.unpersist()


def _tally(rows: DataFrame, day_column: str, counter: str, days: dict[date, DayChange]) -> None:
    """Count `rows` per day into the DayChange `counter`, with the batches they came from."""
    per_day = rows.groupBy(day_column).agg(
        F.count(F.lit(1)).alias("n"), F.collect_set(F.col("ingest_date").cast("string")).alias("batches")
    )
    for r in per_day.collect():
        change = days.setdefault(r[day_column], DayChange())
        setattr(change, counter, getattr(change, counter) + r.n)
        change.batches.update(r.batches)


def _product_changes(
    spark: SparkSession, batches: list[str], product_days: dict[date, DayChange], order_days: dict[date, DayChange]
) -> None:
    """A product version not yet in the dimension changes its valid_from day there, and the facts of every later
    order day that has the product (they join the product as of the order day)."""
    if not batches:
        return
    versions = landing.read_landing(spark, landing.PRODUCTS, batches)
    dated = versions.withColumn("valid_from", landing.event_day(landing.PRODUCTS))
    if table_exists(DIMENSION.name):  # new unless the day already has this version or a later one
        known = read_table(spark, DIMENSION.name).select(
            "product_id", "valid_from", F.col("updated_at").alias("known_at")
        )
        dated = dated.join(
            known,
            (dated.product_id == known.product_id)
            & (dated.valid_from == known.valid_from)
            & (known.known_at >= dated.updated_at),
            "left_anti",
        )
    new = (
        dated.groupBy("product_id")
        .agg(F.min("valid_from").alias("since"), F.collect_set(F.col("ingest_date").cast("string")).alias("batches"))
        .persist()
    )
    try:
        _tally(dated, "valid_from", "product_versions", product_days)
        stg = read_table(spark, STAGING.name).select("product_id", "order_date")
        affected = stg.join(new, "product_id").where(F.col("order_date") >= F.col("since"))
        _tally(
            affected.select("order_date", "product_id", F.explode("batches").alias("ingest_date")).distinct(),
            "order_date",
            "changed_products",
            order_days,
        )
    finally:
        new.unpersist()


def detect(spark: SparkSession, keep_landed: bool = False) -> Detection:
    """What the batches landed since the watermark change, day by day, without writing anything. With
    `keep_landed`, what it read of the order item batches stays cached in `landed` until the caller's `unpersist`."""
    if not table_exists(STAGING.name):
        raise NothingPublished(f"{STAGING.name} is not materialized: backfill the tables before restating late data")
    wm = control.read_watermark(spark, PIPELINE)
    landed = {
        ds: [landing.batch_name(p) for p in landing.batch_dirs(ds)] for ds in (landing.ORDER_ITEMS, landing.PRODUCTS)
    }
    batches = {ds: batches_to_read(names, wm, reprocess_window()) for ds, names in landed.items()}
    order_days: dict[date, DayChange] = {}
    product_days: dict[date, DayChange] = {}
    new_ts, kept = None, None
    if batches[landing.ORDER_ITEMS]:
        new_ts, kept = _order_item_changes(
            spark,
            batches[landing.ORDER_ITEMS],
            batches[landing.ORDER_ITEMS] == landed[landing.ORDER_ITEMS],
            order_days,
            keep_landed,
        )
    _product_changes(spark, batches[landing.PRODUCTS], product_days, order_days)
    start = window_start(landed[landing.ORDER_ITEMS], restatement_window_days())
    holds = control.open_holds(spark)
    days = classify_days(order_days, product_days, wm.pending_days, start, {h.day for h in holds})
    watermark_ts = max((t for t in (wm.watermark_ts, new_ts) if t is not None), default=None)
    refused = [r for dataset, names in batches.items() for r in landing.landed_files(dataset, names).refused]
    return Detection(
        wm,
        watermark_ts,
        batches,
        start,
        days.order_days,
        days.product_days,
        days.outside,
        kept,
        refused,
        days.held,
        holds,
    )


@dataclass(frozen=True)
class LateException:
    """A day with late rows older than the restatement window: recorded, not restated."""

    day: date
    rows: int
    batches: str
    window_start: date | None


@dataclass
class RestatementPlan:
    """The second stage: what a detection makes the restatement write, before anything is written."""

    detection: Detection
    change: Change
    exceptions: list[LateException]
    pending: list[date]  # the days recorded as pending in the watermark before any write (the intent)
    watermark: control.Watermark  # the watermark once every table's write committed


def plan_restatement(detection: Detection) -> RestatementPlan:
    """Every table's days the batches change; staging built from what is staged plus the order item batches read (no
    history scan), or, when none was read (product batches only, or only days left pending), from the landing, as a
    backfill builds it."""
    days = {table: stale for table, stale in detection.days_by_table().items() if stale}
    sources: dict[str, RowSource] = {
        t: Restated(detection.landed) if detection.landed and BY_NAME[t].restate else Rebuilt() for t in days
    }
    wm = detection.watermark
    exceptions = [
        LateException(
            d,
            c.changed + c.quarantined + c.product_versions + c.moved_out,
            ", ".join(sorted(c.batches)),
            detection.window_start,
        )
        for d, c in sorted(detection.outside.items())
    ]
    pending = sorted(set(wm.pending_days) | set(detection.order_days) | set(detection.product_days))
    read = {b for batches in detection.batches_read.values() for b in batches}
    advanced = control.Watermark(detection.new_watermark_ts, sorted(set(wm.batches_read) | read), [])
    return RestatementPlan(detection, Change(Operation.RESTATEMENT, days, sources), exceptions, pending, advanced)


@dataclass
class Restatement:
    """The third stage: what was written."""

    detection: Detection
    publications: dict[str, Publication]  # table -> what was written


def apply_restatement(
    spark: SparkSession,
    plan: RestatementPlan,
    run: RunInfo,
    before_watermark: Callable[[dict[str, Publication]], None] = lambda publications: None,
) -> Restatement:
    """Record the exceptions, then, when there are days to write, record them as pending and publish them; advance
    the watermark only once every table's write committed. A replayed tick, with nothing new, commits nothing."""
    now = datetime.now(UTC)
    new_exceptions = [(e.day, e.rows, e.batches, e.window_start) for e in plan.exceptions]
    control.record_exceptions(spark, new_exceptions, run.run_id, now)
    wm = plan.detection.watermark
    publications: dict[str, Publication] = {}
    if plan.change.days:
        # Intent first: should anything below fail, these days stay pending and are rewritten next time.
        intent = control.Watermark(wm.watermark_ts, wm.batches_read, plan.pending)
        control.write_watermark(spark, PIPELINE, intent, run.run_id, now)
        publications = publish(spark, plan.change, run)
    before_watermark(publications)
    fault_point("before-watermark")
    if plan.change.days or plan.watermark != wm:
        control.write_watermark(spark, PIPELINE, plan.watermark, run.run_id, datetime.now(UTC))
    return Restatement(plan.detection, publications)


def restate(
    spark: SparkSession,
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
    detection = detect(spark, keep_landed=True)
    try:
        on_detection(detection)

        def then(publications: dict[str, Publication]) -> None:
            for table, publication in publications.items():
                on_publication(table, publication)
            before_watermark()

        return apply_restatement(spark, plan_restatement(detection), run, then)
    finally:
        detection.unpersist()
