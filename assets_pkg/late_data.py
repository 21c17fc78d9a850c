"""Late and corrected rows: find exactly the days they change, restate those days in every table, then advance the
watermark (seeds 000, 002).

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from assets_pkg import checks, landing, quarantine, transforms
from assets_pkg.landing import ORDER_ITEM_KEY, ORDER_ITEM_SCHEMA, ORDER_ITEM_VERSION_COLUMNS
from assets_pkg.partitions import first_day, last_day
from assets_pkg.publish import Publication, RunInfo, fault_point, publish
from assets_pkg.tables import BY_NAME, DAY_COLUMN, DIM_PRODUCT, DIMENSION, PUBLISH_ORDER, QUARANTINE_ORDER_ITEMS, STG_ORDER_ITEMS, AfterCommit, Read, Staged
from resources import control
from resources.delta_io import read_days, read_table, table_exists
from resources.settings import settings

PIPELINE = "order_items"


class RestatementError(RuntimeError):
    pass


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
        return DayChange(**{c: getattr(self, c) + getattr(other, c) for c in counters},
                         batches=self.batches | other.batches, pending=self.pending or other.pending)

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
class LandedItems:
    """What the detection read of the order item batches, kept for the restatement's staging build (see
    `restated_stg_order_items`), which then reads no history: every row of the batches, and staging's rows of
    every valid key in them, on whatever day they are staged."""

    batches: list[str]
    rows: DataFrame
    staged: DataFrame

    def release(self) -> None:
        self.rows.unpersist()  # `staged`, a checkpoint, is freed with its DataFrame


@dataclass
class Detection:
    watermark: control.Watermark
    new_watermark_ts: datetime | None
    batches_read: dict[str, list[str]]  # dataset -> batches read now
    window_start: date | None
    order_days: dict[date, DayChange]  # days of the order tables to restate
    product_days: dict[date, DayChange]  # days of dim_product to restate
    outside: dict[date, DayChange]  # older than the window: exceptions, not restated
    landed: LandedItems | None = None  # kept only when asked for (restate), until `release`
    refused: list[landing.Refusal] = field(default_factory=list)  # files of the batches read the contract refuses
    held: dict[date, DayChange] = field(default_factory=dict)  # changed days held since a rollback: not restated
    holds: list = field(default_factory=list)  # every open hold (control.open_holds): who, when, why

    def release(self) -> None:
        if self.landed:
            self.landed.release()

    def _days(self, table: str) -> dict[date, DayChange]:
        # A dimension's days are the days its versions take effect; every other table is by order day.
        return self.product_days if BY_NAME[table].role == DIMENSION else self.order_days

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


def _batches_to_read(dataset: str, wm: control.Watermark) -> list[str]:
    since = (wm.watermark_ts - reprocess_window()).date() if wm.watermark_ts else None
    seen = set(wm.batches_read)
    names = [landing.batch_name(p) for p in landing.batch_dirs(dataset)]
    return [b for b in names if b not in seen or (since is not None and date.fromisoformat(b) >= since)]


def _row_id(columns: list[str]):
    """Identity of a landed row (nulls included), to find it again in quarantine."""
    return F.sha2(F.to_json(F.struct(*columns), {"ignoreNullFields": "false"}), 256)


def _order_item_changes(
    spark: SparkSession, batches: list[str], days: dict[date, DayChange], keep: bool
) -> tuple[datetime | None, LandedItems | None]:
    """Add the days the order item batches change to `days`; return the batches' highest load time, and what was
    read of them when `keep`."""
    candidates = landing.read_landing(spark, landing.ORDER_ITEMS, batches).persist()
    cached = [candidates]
    try:
        valid, rejected = quarantine.split(candidates, first_day(), last_day())
        new = valid.select(*ORDER_ITEM_VERSION_COLUMNS).withColumn("_published", F.lit(False))
        # Staging is scanned whole (a correction may carry another order date) but once: the staged rows of the
        # landed keys are kept for the comparison, the old days and the restatement's staging build. Checkpointed,
        # not cached: Spark recomputes a cached read of a table after every write to that table, and every table the
        # restatement writes after staging is built on these rows, so each write would scan staging whole again.
        staged = (
            read_table(spark, STG_ORDER_ITEMS)
            .join(new.select(*ORDER_ITEM_KEY).distinct(), ORDER_ITEM_KEY, "left_semi")
            .select(*ORDER_ITEM_VERSION_COLUMNS)
            .localCheckpoint()
        )
        published = staged.withColumn("_published", F.lit(True))
        # The published version wins a tie with an identical landed row: re-reading a batch changes nothing.
        winners = transforms.latest_versions(
            new.unionByName(published), ORDER_ITEM_KEY, ORDER_ITEM_SCHEMA.fieldNames(), then=(F.col("_published").desc(),)
        ).where(~F.col("_published"))
        old_day = published.select(*ORDER_ITEM_KEY, F.col("order_date").alias("old_day"))
        changed = winners.join(old_day, ORDER_ITEM_KEY, "left").persist()
        cached.append(changed)
        _tally(changed, "order_date", "changed", days)
        _tally(changed.where("old_day IS NOT NULL AND old_day != order_date"), "old_day", "moved_out", days)

        unseen = rejected
        if table_exists(spark, QUARANTINE_ORDER_ITEMS):
            held = read_table(spark, QUARANTINE_ORDER_ITEMS).select(_row_id(ORDER_ITEM_VERSION_COLUMNS).alias("_id"))
            unseen = rejected.withColumn("_id", _row_id(ORDER_ITEM_VERSION_COLUMNS)).join(held, "_id", "left_anti")
        _tally(unseen, "quarantine_day", "quarantined", days)
        landed = LandedItems(batches, candidates, staged) if keep else None
        if landed:
            cached.remove(candidates)
        return candidates.agg(F.max("ingested_at")).first()[0], landed
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


def _product_changes(spark: SparkSession, batches: list[str], product_days: dict, order_days: dict) -> None:
    """A product version not yet in dim_product changes its valid_from day there, and the facts of every later order
    day that has the product (they join the product as of the order day)."""
    if not batches:
        return
    versions = landing.read_landing(spark, landing.PRODUCTS, batches)
    dated = versions.withColumn("valid_from", landing.event_day(landing.PRODUCTS))
    if table_exists(spark, DIM_PRODUCT):  # new unless the day already holds this version or a later one
        held = read_table(spark, DIM_PRODUCT).select("product_id", "valid_from", F.col("updated_at").alias("held_at"))
        dated = dated.join(
            held,
            (dated.product_id == held.product_id) & (dated.valid_from == held.valid_from) & (held.held_at >= dated.updated_at),
            "left_anti",
        )
    new = dated.groupBy("product_id").agg(F.min("valid_from").alias("since"), F.collect_set(F.col("ingest_date").cast("string")).alias("batches")).persist()
    try:
        _tally(dated, "valid_from", "product_versions", product_days)
        stg = read_table(spark, STG_ORDER_ITEMS).select("product_id", "order_date")
        affected = stg.join(new, "product_id").where(F.col("order_date") >= F.col("since"))
        _tally(affected.select("order_date", "product_id", F.explode("batches").alias("ingest_date")).distinct(),
               "order_date", "changed_products", order_days)
    finally:
        new.unpersist()


def detect(spark: SparkSession, keep_landed: bool = False) -> Detection:
    """What the batches landed since the watermark change, day by day, without writing anything (the `stale`
    preview, and the first half of a restatement). With `keep_landed`, what it read of the order item batches stays
    cached in `landed` until the caller's `release`."""
    if not table_exists(spark, STG_ORDER_ITEMS):
        raise RestatementError("stg_order_items is not materialized: backfill the tables before restating late data")
    wm = control.read_watermark(spark, PIPELINE)
    batches = {ds: _batches_to_read(ds, wm) for ds in (landing.ORDER_ITEMS, landing.PRODUCTS)}
    order_days: dict[date, DayChange] = {}
    product_days: dict[date, DayChange] = {}
    new_ts, landed = None, None
    if batches[landing.ORDER_ITEMS]:
        new_ts, landed = _order_item_changes(spark, batches[landing.ORDER_ITEMS], order_days, keep_landed)
    _product_changes(spark, batches[landing.PRODUCTS], product_days, order_days)
    for day in wm.pending_days:
        order_days.setdefault(day, DayChange()).pending = True

    every_batch = [landing.batch_name(p) for p in landing.batch_dirs(landing.ORDER_ITEMS)]
    window_start = date.fromisoformat(max(every_batch)) - timedelta(days=restatement_window_days()) if every_batch else None
    outside = {}
    if window_start:
        for days in (order_days, product_days):
            for day in [d for d in days if d < window_start and not days[d].pending]:
                change = days.pop(day)
                outside[day] = outside[day].plus(change) if day in outside else change
    # A rolled-back day is held: what landed for it is not applied until the operator releases it.
    holds = control.open_holds(spark)
    held: dict[date, DayChange] = {}
    for days in (order_days, product_days, outside):
        for day in [d for d in days if d in {h.day for h in holds}]:
            change = days.pop(day)
            held[day] = held[day].plus(change) if day in held else change
    watermark_ts = max((t for t in (wm.watermark_ts, new_ts) if t is not None), default=None)
    refused = [r for dataset, names in batches.items() for r in landing.landed_files(dataset, names).refused]
    return Detection(wm, watermark_ts, batches, window_start, order_days, product_days, outside, landed, refused,
                     held, holds)


@dataclass
class Restatement:
    detection: Detection
    publications: dict[str, Publication]  # table -> what was written


def restate(
    spark: SparkSession,
    run: RunInfo | None = None,
    on_detection: Callable[[Detection], None] = lambda detection: None,
    on_publication: Callable[[str, Publication], None] = lambda table, publication: None,
    before_watermark: Callable[[], None] = lambda: None,
) -> Restatement:
    """Restate exactly the days the new batches change, in every table (one commit per table), then advance the
    watermark. `on_detection` sees what will be written before anything is; `before_watermark` runs between the last
    write and the watermark update (tests inject a crash there)."""
    found, publications = None, {}
    for stage in restatement(spark, run, before_watermark):
        if isinstance(stage, Detection):
            found = stage
            on_detection(found)
        else:
            table, publication = stage
            publications[table] = publication
            on_publication(table, publication)
    return Restatement(found, publications)


def restatement(
    spark: SparkSession, run: RunInfo | None = None, before_watermark: Callable[[], None] = lambda: None
) -> Iterator[Detection | tuple[str, Publication]]:
    """`restate` as the stages it goes through, for a caller that records each as it happens (a Dagster op): first
    the Detection, before anything is written, then (table, Publication) after each table's commit."""
    run = run or RunInfo(f"restate-{uuid.uuid4().hex[:12]}")
    found = detect(spark, keep_landed=True)
    try:
        yield found
        yield from _restate(spark, run, found, before_watermark)
    finally:
        found.release()


def restated_stg_order_items(landed: LandedItems):
    """Staging's days for a restatement, from what is published plus the batches just read, not from the history:
    an item's latest version is its staged one unless one of the batches beats it, so it is decided, by the same
    transform, over the days' staged rows, the staged rows of the keys in the batches (wherever they are) and the
    batches' rows. Quarantine keeps its rows of other batches and takes these batches' afresh (a batch re-read is not
    quarantined twice). Nothing lost is checked against the same inputs; the landing as a whole is checked by
    backfills and `check`.

    Exact because staging holds every batch read so far: each restatement stages the days of the batches it reads
    (the first after a backfill reads them all), and a backfill reads the whole landing. A day rolled back holds an
    older version until it is backfilled: a restatement builds on what is staged."""

    def build(spark: SparkSession, days: list[date], read: Read) -> Staged:
        on_days = read_days(spark, STG_ORDER_ITEMS, DAY_COLUMN[STG_ORDER_ITEMS], days).select(*ORDER_ITEM_VERSION_COLUMNS)
        valid, rejected = quarantine.split(landed.rows, first_day(), last_day())
        versions = on_days.unionByName(landed.staged).unionByName(valid.select(*ORDER_ITEM_VERSION_COLUMNS))
        stg = transforms.stg_order_items(versions, days)
        read_batches = [date.fromisoformat(b) for b in landed.batches]
        held = read_days(spark, QUARANTINE_ORDER_ITEMS, DAY_COLUMN[QUARANTINE_ORDER_ITEMS], days).where(
            ~F.col("ingest_date").isin(read_batches))
        quarantined = quarantine.for_days(held, days).unionByName(quarantine.for_days(rejected, days)).persist()
        every_version = versions.unionByName(rejected.select(*ORDER_ITEM_VERSION_COLUMNS))
        return Staged(
            table=stg,
            side_tables={QUARANTINE_ORDER_ITEMS: quarantined},
            lost=quarantine.lost_keys(every_version, stg, quarantined, days),
            persisted=[quarantined],
            # Built from the batches read: late rows older than the window are not among them and stay unpublished.
            after_commit=exceptions_after_publish(resolve=False),
        )

    return build


def exceptions_after_publish(resolve: bool) -> AfterCommit:
    """late_data_outside_window on each day just published: it passes unless the day holds late rows older than the
    restatement window that are still unpublished. A build from the whole landing publishes them, so it resolves
    their exceptions (`resolve`); a restatement, which builds from the batches it read, leaves an open one open."""

    def outcomes(spark: SparkSession, days: list[date], run_id: str, now: datetime) -> list[checks.Outcome]:
        still_open = control.open_exceptions(spark, days)
        if resolve and still_open:
            control.resolve_exceptions(spark, [e.day for e in still_open], run_id, now)
        by_day = {e.day: e for e in still_open}
        found = []
        for day in days:
            e = by_day.get(day)
            metadata = {"late_rows": e.rows, "batches": e.batches} if e else {"late_rows": 0}
            if e and resolve:
                metadata["resolved_by_run"] = run_id
            found.append(checks.Outcome(checks.LATE_DATA, day, e is None or resolve, metadata))
        return found

    return outcomes


def _restate(spark, run, found, before_watermark) -> Iterator[tuple[str, Publication]]:
    now = datetime.now(timezone.utc)
    control.record_exceptions(
        spark,
        [(d, c.changed + c.quarantined + c.product_versions + c.moved_out, ", ".join(sorted(c.batches)), found.window_start)
         for d, c in sorted(found.outside.items())],
        run.run_id,
        now,
    )
    wm = found.watermark
    to_write = {t: days for t, days in found.days_by_table().items() if days}
    if to_write:
        # Intent first: should anything below fail, these days stay pending and are rewritten next time.
        pending = sorted(set(wm.pending_days) | set(found.order_days) | set(found.product_days))
        control.write_watermark(spark, PIPELINE, control.Watermark(wm.watermark_ts, wm.batches_read, pending), run.run_id, now)
        # Staging from what is staged plus the order item batches read (no history scan); when none was read
        # (product batches only, or only days left pending), from the landing, as a backfill builds it.
        builds = {STG_ORDER_ITEMS: restated_stg_order_items(found.landed)} if found.landed else {}
        yield from publish(spark, to_write, run, builds).items()
    before_watermark()
    fault_point("before-watermark")
    read = {b for batches in found.batches_read.values() for b in batches}
    advanced = control.Watermark(found.new_watermark_ts, sorted(set(wm.batches_read) | read), [])
    if to_write or advanced != wm:  # a replayed tick, with nothing new, commits nothing at all
        control.write_watermark(spark, PIPELINE, advanced, run.run_id, datetime.now(timezone.utc))
