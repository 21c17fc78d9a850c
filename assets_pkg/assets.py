"""The asset graph. Every table is daily-partitioned by event date and materialized the same way (`publish`):
build its days, run the blocking checks on them, and only then replace exactly those days with `overwrite_days`
(one Delta commit per table per run), record fingerprints and the audit trail."""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timezone

from dagster import AssetExecutionContext, AssetSpec, Failure, multi_asset
from dagster_pyspark import LazyPySparkResource
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from assets_pkg import checks, landing, liveness, quarantine, recording, transforms
from assets_pkg.checks import Reconciliation, TableChecks
from assets_pkg.landing import ORDER_ITEM_KEY, ORDER_ITEM_VERSION_COLUMNS
from assets_pkg.partitions import backfill_policy, daily_partitions, first_day, last_day, run_days
from assets_pkg.partitions import days as all_days
from resources import audit, control
from resources.delta_io import day_runs, overwrite_days, read_days

LANDING_ORDER_ITEMS = "landing_order_items"
LANDING_PRODUCTS = "landing_products"
STG_ORDER_ITEMS = "stg_order_items"
QUARANTINE_ORDER_ITEMS = "quarantine_order_items"
DIM_PRODUCT = "dim_product"
FACT_ORDER_ITEM = "fact_order_item"
DAILY_REVENUE = "daily_revenue"
CUSTOMER_DAILY_FEATURES = "customer_daily_features"

# The column each table is partitioned (and overwritten) by.
DAY_COLUMN = {
    STG_ORDER_ITEMS: "order_date",
    QUARANTINE_ORDER_ITEMS: "quarantine_day",
    DIM_PRODUCT: "valid_from",
    FACT_ORDER_ITEM: "order_date",
    DAILY_REVENUE: "order_date",
    CUSTOMER_DAILY_FEATURES: "order_date",
}

_COUNT = "count(1)"

# Up to this many days, staging reads only the items that have a version on them (their keys broadcast: a year of
# TPC-H SF1's keys is about 900,000); above it, the whole landing once.
NARROWED_UP_TO_DAYS = 366

TABLE_CHECKS = {
    # Nothing lost is checked where the landing is read: landing -> staging + quarantine (in a restatement: staged rows
    # plus the batches read). The fact then reconciles with staging day by day (counts and amounts), so a key cannot
    # vanish anywhere without a check failing.
    STG_ORDER_ITEMS: TableChecks(key=ORDER_ITEM_KEY, day_column="order_date", nothing_lost=True, late_data=True),
    DIM_PRODUCT: TableChecks(key=["product_id", "valid_from"], day_column="valid_from"),
    FACT_ORDER_ITEM: TableChecks(
        key=ORDER_ITEM_KEY,
        day_column="order_date",
        # Seed 002's reconciliation: counts and amounts of the fact equal staging's, day by day.
        reconciliation=Reconciliation(
            STG_ORDER_ITEMS,
            {
                "items": (_COUNT, _COUNT),
                "gross_amount": ("sum(gross_amount)", "sum(gross_amount)"),
                "discount_amount": ("sum(discount_amount)", "sum(discount_amount)"),
                "net_amount": ("sum(net_amount)", "sum(gross_amount - discount_amount)"),
            },
        ),
    ),
    DAILY_REVENUE: TableChecks(
        key=["order_date", "channel"],
        day_column="order_date",
        reconciliation=Reconciliation(
            FACT_ORDER_ITEM,
            {
                "items": ("sum(item_count)", _COUNT),
                "gross_amount": ("sum(gross_amount)", "sum(gross_amount)"),
                "discount_amount": ("sum(discount_amount)", "sum(discount_amount)"),
                "net_amount": ("sum(net_amount)", "sum(net_amount)"),
            },
        ),
    ),
    CUSTOMER_DAILY_FEATURES: TableChecks(
        key=["customer_id", "order_date"],
        day_column="order_date",
        reconciliation=Reconciliation(
            FACT_ORDER_ITEM,
            {"items": ("sum(item_count)", _COUNT), "net_amount": ("sum(net_amount)", "sum(net_amount)")},
        ),
    ),
}


@dataclass
class Staged:
    """What a table's build produces for a range, before anything is written."""

    table: DataFrame
    upstream: DataFrame | None = None  # the upstream range it must reconcile with
    lost: DataFrame | None = None  # keys that should be in the table (or quarantine) but are not
    side_tables: dict[str, DataFrame] = field(default_factory=dict)  # written in the same run, e.g. quarantine
    persisted: list[DataFrame] = field(default_factory=list)  # inputs read once for the build, checks and writes
    from_landing: bool = True  # built from the whole landing (not from staged rows plus new batches)


def _source_watermark(df: DataFrame) -> datetime | None:
    """The newest load time (`ingested_at`) among the rows published, for tables that carry it."""
    if "ingested_at" not in df.columns:
        return None
    seconds = df.agg(F.max("ingested_at").cast("double")).first()[0]
    return datetime.fromtimestamp(seconds, tz=timezone.utc) if seconds is not None else None


# On each run of a command-line backfill (which is not a Dagster backfill: see backfill.runs_url), its id.
CLI_BACKFILL_TAG = "exact_backfills/backfill"


@dataclass(frozen=True)
class RunInfo:
    """Who writes: recorded in every Delta commit, the audit trail and quarantine rows."""

    run_id: str
    backfill_id: str | None = None

    @classmethod
    def of(cls, run) -> "RunInfo":
        """A Dagster run's: its backfill is Dagster's (the UI's) or the command line's."""
        return cls(run.run_id, run.tags.get("dagster/backfill") or run.tags.get(CLI_BACKFILL_TAG))


class BlockingChecksFailed(RuntimeError):
    def __init__(self, table: str, days: list[date], outcomes: list[checks.Outcome]):
        self.table, self.days, self.outcomes = table, days, outcomes
        failing = [o for o in outcomes if not o.passed]
        super().__init__(
            f"{table}: blocking checks failed for {len({o.day for o in failing})} day(s); nothing written for "
            f"{len(days)} day(s) {days[0]}..{days[-1]}. "
            + "; ".join(f"{o.check} on {o.day}: {checks.summary(o)}" for o in failing[:10])
        )
        self.failing_days = sorted({o.day.isoformat() for o in failing})

    def publication(self) -> "Publication":
        """What was published: nothing, and the check results that stopped it."""
        return Publication(self.days, self.outcomes, metadata={})

    def as_failure(self) -> Failure:
        return Failure(description=str(self), metadata={"failing_days": ", ".join(self.failing_days)})


@dataclass
class Publication:
    days: list[date]
    outcomes: list[checks.Outcome]  # every check result, one per check per day
    metadata: dict[str, dict[date, dict]]  # per table written (the table and its side tables): each day's figures
    totals: dict[str, dict] = field(default_factory=dict)  # per table written: the run's figures over all its days


BUILDS: dict[str, Callable[[SparkSession, list[date]], Staged]] = {}


def publish(
    spark: SparkSession,
    table: str,
    days: list[date],
    run: RunInfo,
    write_table: bool = True,
    build: Callable[[SparkSession, list[date]], Staged] | None = None,
) -> Publication:
    """Build `table` for `days` (with its build, or `build`), run the blocking checks on the result, and only then
    replace exactly those days (one Delta commit per table) and record fingerprints and the audit trail. Raises
    BlockingChecksFailed, having written nothing, when a blocking check fails (reconcile before publish).

    Every writer goes through here: an asset run (a backfill's range) and a restatement (scattered days)."""
    started = datetime.now(timezone.utc)
    t0 = time.monotonic()
    table_checks = TABLE_CHECKS[table]
    staged = (build or BUILDS[table])(spark, days)
    df = staged.table.persist()  # checked and written from the same computed rows
    try:
        outcomes, profile = checks.evaluate_blocking(df, staged.upstream, staged.lost, table_checks, days)
        if any(not o.passed for o in outcomes):
            raise BlockingChecksFailed(table, days, outcomes)
        commit_info = {"run_id": run.run_id, "backfill_id": run.backfill_id, "days": len(days), "first": days[0], "last": days[-1]}
        metadata, totals = {}, {}
        for side_table, side_df in staged.side_tables.items():
            # A side table is the other half of the same build (rows accepted vs rows quarantined): rewriting one
            # without the other would leave a row in both or in neither, so they are always written together.
            side_df = side_df.withColumn("run_id", F.lit(run.run_id))  # which run put the row there
            side = overwrite_days(side_df, side_table, DAY_COLUMN[side_table], days, {**commit_info, "asset": side_table})
            metadata[side_table], totals[side_table] = _commit_metadata(side, days), _commit_totals(side, days)
        if not write_table:
            return Publication(days, outcomes=[], metadata=metadata, totals=totals)
        source_watermark = _source_watermark(df)
        commit = overwrite_days(df, table, table_checks.day_column, days, {**commit_info, "asset": table})
        found = audit.latest_before_run(spark, run.run_id)
        previous = {day: found[(table, day)] for day in days if (table, day) in found}
        outcomes += checks.evaluate_after_commit(profile, previous, days)
        ended = datetime.now(timezone.utc)
        duplicates = {o.day: o.metadata["duplicate_per_1k"] for o in outcomes if o.check == checks.UNIQUE_KEY}
        mismatches = {o.day: o.metadata["mismatch_count"] for o in outcomes if o.check == checks.RECONCILES}
        changed = {o.day: o.metadata["changed"] for o in outcomes if o.check == checks.FINGERPRINT}
        audit.append(
            spark,
            [
                audit.AuditRow(
                    run_id=run.run_id,
                    backfill_id=run.backfill_id,
                    operation="materialize",
                    asset=table,
                    partition=day,
                    rows_written=profile[day]["rows"] if day in profile else 0,
                    fingerprint=profile[day]["fingerprint"] if day in profile else None,
                    delta_version=commit.version,
                    started_at=started,
                    ended_at=ended,
                    source_watermark=source_watermark,
                    duplicate_per_1k=duplicates.get(day),
                    mismatch_count=mismatches.get(day),
                )
                for day in days
            ],
        )
        if table_checks.late_data:
            outcomes += late_data_outcomes(spark, days, run, ended, resolve=staged.from_landing)
        metadata[table] = {
            day: {
                **day_metadata,
                "fingerprint": profile[day]["fingerprint"] if day in profile else "",
                "fingerprint_changed": changed.get(day, False),
                "duplicate_per_1k": duplicates.get(day, 0.0),
                **({"mismatch_count": mismatches[day]} if day in mismatches else {}),
            }
            for day, day_metadata in _commit_metadata(commit, days).items()
        }
        totals[table] = {
            **_commit_totals(commit, days),
            "partitions_changed": sum(changed.values()),
            "duration_s": round(time.monotonic() - t0, 3),
            **({"watermark_lag_s": round((ended - source_watermark).total_seconds(), 1)} if source_watermark else {}),
        }
        return Publication(days, outcomes=outcomes, metadata=metadata, totals=totals)
    finally:
        for cached in [df, *staged.persisted]:
            cached.unpersist()


def late_data_outcomes(spark: SparkSession, days: list[date], run: RunInfo, now: datetime, resolve: bool) -> list[checks.Outcome]:
    """late_data_outside_window on each day just written: it passes unless the day holds late rows older than the
    restatement window that are still unpublished. A build from the whole landing publishes them (and resolves their
    exceptions); a restatement, which builds from the batches it read, leaves an open exception open."""
    still_open = control.open_exceptions(spark, days)
    if resolve and still_open:
        control.resolve_exceptions(spark, [e.day for e in still_open], run.run_id, now)
    by_day = {e.day: e for e in still_open}
    outcomes = []
    for day in days:
        e = by_day.get(day)
        metadata = {"late_rows": e.rows, "batches": e.batches} if e else {"late_rows": 0}
        if e and resolve:
            metadata["resolved_by_run"] = run.run_id
        outcomes.append(checks.Outcome(checks.LATE_DATA, day, e is None or resolve, metadata))
    return outcomes


def _materialize(context: AssetExecutionContext, spark: SparkSession, table: str, side_tables: tuple[str, ...]):
    liveness.record(context)
    days = run_days(context)
    selected = {k.to_user_string() for k in context.selected_asset_keys}
    run = RunInfo.of(context.run)
    check_outputs = recording.selected_check_outputs(context, table)
    if not selected & {table, *side_tables}:
        # Only checks selected (the UI's "Execute" on a check, or the `check` command): verify what is published.
        outcomes = verify_published(spark, table, days, run)
        yield from recording.publication_events(context, table, Publication(days, outcomes, {}), check_outputs=check_outputs)
        return
    try:
        publication = publish(spark, table, days, run, write_table=table in selected)
    except BlockingChecksFailed as failed:
        yield from recording.publication_events(context, table, failed.publication())
        raise failed.as_failure() from None
    yield from recording.publication_events(context, table, publication, selected, check_outputs)
    for written, totals in publication.totals.items():
        context.log.info(f"{written}: {len(days)} day(s) {_day_ranges(days)} written: {totals}")


def _day_ranges(days: list[date]) -> str:
    return ", ".join(f"{a}..{b}" if a != b else str(a) for a, b in day_runs(days))


def _commit_metadata(commit, days: list[date]) -> dict[date, dict]:
    """Each day's figures of one commit (rows and files as Delta's log records them per partition)."""
    version = commit.version if commit.version is not None else -1
    return {
        day: {
            "rows_written": commit.by_day.get(day.isoformat(), {}).get("rows_written", 0),
            "files_added": commit.by_day.get(day.isoformat(), {}).get("files_added", 0),
            "files_removed": commit.by_day.get(day.isoformat(), {}).get("files_removed", 0),
            "delta_version": version,
            "written_with_days": _day_ranges(days),  # the run's range, which this day was written with
        }
        for day in days
    }


def _commit_totals(commit, days: list[date]) -> dict:
    return {
        "rows_written": commit.rows_written,
        "delta_version": commit.version if commit.version is not None else -1,
        "files_added": commit.files_added,
        "files_removed": commit.files_removed,
        "partitions": len(days),
    }


# Every step that writes the lake claims this Dagster concurrency pool, whose limit dagster.yaml sets to 1: steps of
# any runs (the UI's, the sensor's, and the command line's, which Dagster enforces too) write one at a time, so two
# runs over the same days wait for each other instead of failing on Delta's conflict detection half-way.
LAKE_WRITES_POOL = "lake_writes"


def daily_table(name: str, deps: tuple[str, ...] = (), side_tables: tuple[str, ...] = (), description: str = ""):
    """Declare a daily-partitioned Delta table built by `build(spark, days) -> Staged`, with its checks."""
    specs = [
        AssetSpec(name, deps=list(deps), description=description, kinds={"spark", "delta"}, group_name="orders"),
        *[AssetSpec(s, deps=list(deps), kinds={"spark", "delta"}, group_name="orders") for s in side_tables],
    ]

    def decorator(build: Callable[[SparkSession, list[date]], Staged]):
        BUILDS[name] = build

        # can_subset makes the per-check outputs optional: results are logged per partition, not returned.
        @multi_asset(
            name=name,
            specs=specs,
            check_specs=checks.check_specs(name, TABLE_CHECKS[name]),
            partitions_def=daily_partitions,
            backfill_policy=backfill_policy,
            can_subset=True,
            pool=LAKE_WRITES_POOL,
        )
        def _asset(context: AssetExecutionContext, pyspark: LazyPySparkResource):
            yield from _materialize(context, pyspark.spark_session, name, side_tables)

        return _asset

    return decorator


def check_published(spark: SparkSession, table: str, days: list[date]) -> tuple[list[checks.Outcome], dict]:
    """The blocking checks on what is published now (the same checks a materialization runs before writing), and
    the days' profile (rows, fingerprint)."""
    tc = TABLE_CHECKS[table]
    df = read_days(spark, table, tc.day_column, days)
    rec = tc.reconciliation
    upstream = read_days(spark, rec.upstream, DAY_COLUMN[rec.upstream], days) if rec else None
    lost = None
    if tc.nothing_lost:
        quarantined = read_days(spark, QUARANTINE_ORDER_ITEMS, "quarantine_day", days)
        lost = quarantine.lost_keys(landing.read_landing(spark, landing.ORDER_ITEMS), df, quarantined, days)
    return checks.evaluate_blocking(df, upstream, lost, tc, days)


def verify_published(spark: SparkSession, table: str, days: list[date], run: RunInfo) -> list[checks.Outcome]:
    """Every check of `table` on what is published for `days`, without writing: the blocking checks; the fingerprint
    and row count against what the pipeline last wrote (a change behind its back fails them); up to date with the
    landing and late data outside the window, from the late-data detection."""
    from assets_pkg import late_data  # it builds on this module; only a checks-only run needs its detection

    outcomes, profile = check_published(spark, table, days)
    found = audit.latest_before_run(spark, run.run_id)
    recorded = {day: found[(table, day)] for day in days if (table, day) in found}
    try:
        detection = late_data.detect(spark)
        stale, outside = set(detection.days_by_table()[table]), set(detection.outside)
    except late_data.RestatementError:  # staging not built yet: nothing landed is published, nothing is stale
        stale, outside = set(), set()
    outcomes += checks.evaluate_published(profile, recorded, days, stale)
    if TABLE_CHECKS[table].late_data:
        late = {e.day for e in control.open_exceptions(spark, days)} | outside
        outcomes += [checks.Outcome(checks.LATE_DATA, day, day not in late, {"late_rows_unpublished": day in late}) for day in days]
    return outcomes


@daily_table(
    STG_ORDER_ITEMS,
    deps=(LANDING_ORDER_ITEMS,),
    side_tables=(QUARANTINE_ORDER_ITEMS,),
    description="Current version of each order item (natural key order_id + order_item_id): duplicate deliveries "
    "removed, corrections applied, by its current order_date. Rows breaking the contract go to "
    "quarantine_order_items with the reason.",
)
def stg_order_items(spark: SparkSession, days: list[date]) -> Staged:
    landed = landing.read_landing(spark, landing.ORDER_ITEMS)
    if len(days) <= NARROWED_UP_TO_DAYS:
        # A chunk (or a restatement that read no order item batch): only the items with a version on the days can be
        # on them. Their versions are kept for the build and checks instead of the whole landing (at SF1, 3 days:
        # 7,103 rows, not 6,001,233), with every row breaking the contract, which quarantine files by a day of its
        # own: one scan for both.
        marked = transforms.mark_items_dated_on(landed, days)
        read = marked.where(F.col(transforms.ITEM_ON_DAYS) | quarantine.breaks_contract(first_day(), last_day())).persist()
        items = read.where(transforms.ITEM_ON_DAYS).drop(transforms.ITEM_ON_DAYS)
        landed = read.drop(transforms.ITEM_ON_DAYS)
    else:
        read = items = landed = landed.persist()  # most of the history: read once
    versions, _ = quarantine.split(items, first_day(), last_day())
    _, rejected = quarantine.split(landed, first_day(), last_day())  # by quarantine day, whatever the row's key
    stg = transforms.stg_order_items(versions, days)
    quarantined = quarantine.for_days(rejected, days).persist()
    return Staged(
        table=stg,
        side_tables={QUARANTINE_ORDER_ITEMS: quarantined},
        lost=quarantine.lost_keys(items, stg, quarantined, days),
        persisted=[read, quarantined],
    )


def restated_stg_order_items(
    spark: SparkSession, days: list[date], landed: DataFrame, staged: DataFrame, batches: list[str]
) -> Staged:
    """Staging's `days` for a restatement, from what is published plus the batches just read (`landed`), not from
    the history: an item's latest version is its staged one unless one of the batches beats it, so it is decided, by
    the same transform, over the days' staged rows, the staged rows of the keys in the batches (`staged`, wherever
    they are) and the batches' rows. Quarantine keeps its rows of other batches and takes these batches' afresh (a
    batch re-read is not quarantined twice). Nothing lost is checked against the same inputs; the landing as a whole
    is checked by backfills and `check`.

    Exact because staging holds every batch read so far: each restatement stages the days of the batches it reads
    (the first after a backfill reads them all), and a backfill reads the whole landing. A day rolled back holds an
    older version until it is backfilled: a restatement builds on what is staged."""
    on_days = read_days(spark, STG_ORDER_ITEMS, "order_date", days).select(*ORDER_ITEM_VERSION_COLUMNS)
    valid, rejected = quarantine.split(landed, first_day(), last_day())
    versions = on_days.unionByName(staged).unionByName(valid.select(*ORDER_ITEM_VERSION_COLUMNS))
    stg = transforms.stg_order_items(versions, days)
    read = [date.fromisoformat(b) for b in batches]
    held = read_days(spark, QUARANTINE_ORDER_ITEMS, "quarantine_day", days).where(~F.col("ingest_date").isin(read))
    quarantined = quarantine.for_days(held, days).unionByName(quarantine.for_days(rejected, days)).persist()
    every_version = versions.unionByName(rejected.select(*ORDER_ITEM_VERSION_COLUMNS))
    return Staged(
        table=stg,
        side_tables={QUARANTINE_ORDER_ITEMS: quarantined},
        lost=quarantine.lost_keys(every_version, stg, quarantined, days),
        persisted=[quarantined],
        from_landing=False,
    )


@daily_table(DIM_PRODUCT, deps=(LANDING_PRODUCTS,), description="Product versions by the day they take effect "
             "(valid_from): the product dimension as of any day.")
def dim_product(spark: SparkSession, days: list[date]) -> Staged:
    versions = landing.read_landing(spark, landing.PRODUCTS)
    return Staged(table=transforms.dim_product_changes(versions, first_day(), days))


# Day to day: a product change on day D reaches later days' facts through a restatement of the days it changes (see
# late_data), not through a "D and every later day" mapping, which makes Dagster backfill every later day.
@daily_table(FACT_ORDER_ITEM, deps=(STG_ORDER_ITEMS, DIM_PRODUCT), description=(
    "One row per order item, with net amount and the product's category and status as of the order day."))
def fact_order_item(spark: SparkSession, days: list[date]) -> Staged:
    stg = read_days(spark, STG_ORDER_ITEMS, "order_date", days)
    products = read_days(spark, DIM_PRODUCT, "valid_from", all_days(first_day(), max(days)))
    fact = transforms.fact_order_item(stg, products)
    return Staged(table=fact, upstream=stg)


@daily_table(DAILY_REVENUE, deps=(FACT_ORDER_ITEM,), description=(
    "Per order_date and channel: items, distinct orders, gross, discount, net and cost."))
def daily_revenue(spark: SparkSession, days: list[date]) -> Staged:
    fact = read_days(spark, FACT_ORDER_ITEM, "order_date", days)
    return Staged(table=transforms.daily_revenue(fact), upstream=fact)


@daily_table(CUSTOMER_DAILY_FEATURES, deps=(FACT_ORDER_ITEM,), description="ML feature table keyed (customer_id, order_date).")
def customer_daily_features(spark: SparkSession, days: list[date]) -> Staged:
    fact = read_days(spark, FACT_ORDER_ITEM, "order_date", days)
    return Staged(table=transforms.customer_daily_features(fact), upstream=fact)


pipeline_assets = [stg_order_items, dim_product, fact_order_item, daily_revenue, customer_daily_features]
# The order a restatement rewrites tables in: each after everything it reads.
PUBLISH_ORDER = [STG_ORDER_ITEMS, DIM_PRODUCT, FACT_ORDER_ITEM, DAILY_REVENUE, CUSTOMER_DAILY_FEATURES]
