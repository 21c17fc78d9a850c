"""Every table of the lake, declared once: its name, role, natural key, day column, upstream tables, builds and
checks. The Dagster assets and their checks, the order tables are published in, what a landed batch makes stale, the
CLI's table list and the tests' table facts are all derived from `TABLES`; no other module names a table.

A build turns the days to write into rows, `build(spark, days, read) -> Staged`, reading its upstream tables only
through `read(table, days)`: the rows the same change builds for them, or what is published (see publish.py)."""

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date
from enum import Enum

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from assets_pkg import transforms
from exact_backfills import landing, landing_index, quarantine
from exact_backfills.checks import NothingLost, Reconciliation, TableChecks
from exact_backfills.landing import ORDER_ITEM_KEY, ORDER_ITEM_VERSION_COLUMNS
from exact_backfills.partitions import days as all_days
from exact_backfills.partitions import first_day, last_day
from resources.delta_io import Scan, read_days

LANDING_ORDER_ITEMS = "landing_order_items"
LANDING_PRODUCTS = "landing_products"
STG_ORDER_ITEMS = "stg_order_items"
QUARANTINE_ORDER_ITEMS = "quarantine_order_items"
DIM_PRODUCT = "dim_product"
FACT_ORDER_ITEM = "fact_order_item"
DAILY_REVENUE = "daily_revenue"
CUSTOMER_DAILY_FEATURES = "customer_daily_features"
DAILY_CATEGORY_REVENUE = "daily_category_revenue"

# The landing as Dagster assets: each observes one landing dataset.
LANDING_DATASETS = {LANDING_ORDER_ITEMS: landing.ORDER_ITEMS, LANDING_PRODUCTS: landing.PRODUCTS}


class Role(Enum):
    """What a table's days hold, and so which days a landed batch makes stale in it."""

    ORDER_GRAIN = "order-grain"  # rows of order items by order day: stale on the days of the order items that change
    DIMENSION = "dimension"  # versions by the day they take effect: stale on the days new versions take effect
    MART = "mart"  # aggregates of order-grain rows by order day: stale with them


_COUNT = "count(1)"

Read = Callable[[str, list[date]], DataFrame]


@dataclass
class Staged:
    """What a table's build produces for its days, before anything is written."""

    table: DataFrame
    upstream: DataFrame | None = None  # the upstream rows it must reconcile with
    lost: DataFrame | None = None  # keys that should be in the table (or quarantine) but are not
    side_tables: dict[str, DataFrame] = field(default_factory=dict)  # written with it, e.g. quarantine
    cached: list[DataFrame] = field(default_factory=list)  # inputs read once for the build, checks and writes
    scans: list[Scan] = field(default_factory=list)  # what its reads of the landing and of published tables scan

    def unpersist(self) -> None:
        for df in [self.table, *self.side_tables.values(), *self.cached]:
            df.unpersist()


Build = Callable[[SparkSession, list[date], Read], Staged]


@dataclass
class LandedBatches:
    """What a restatement's detection read of newly landed order item batches, kept for staging's restatement build,
    which then reads no history: every row of the batches, and staging's rows of every valid key in them, on whatever
    day they are staged."""

    batches: list[str]
    rows: DataFrame
    staged: DataFrame

    def unpersist(self) -> None:
        self.rows.unpersist()  # `staged`, a checkpoint, is freed with its DataFrame


@dataclass(frozen=True)
class SideTable:
    """A table written with another, from the same build (rows accepted vs rows quarantined)."""

    name: str
    day_column: str


@dataclass(frozen=True)
class Table:
    name: str
    role: Role
    key: list[str]  # the natural key: one row per key and day
    day_column: str  # its daily partition
    upstream: tuple[str, ...]  # the tables (or landing assets) it is built from
    build: Build
    description: str
    checks: TableChecks = field(default_factory=TableChecks)
    side_tables: tuple[SideTable, ...] = ()
    # A restatement's build of the table's days from what it holds plus the batches just read (None: `build`).
    restate: Callable[[LandedBatches], Build] | None = None

    @property
    def landing_dataset(self) -> str | None:
        """The landing dataset the table is built from directly, if any."""
        return next((LANDING_DATASETS[u] for u in self.upstream if u in LANDING_DATASETS), None)


# Up to this many days, a build reads only the landed batches that can hold rows of its days (see
# landing_index), and staging only the items that have a version on them (their keys broadcast); above it, or over
# every partition day, the whole landing once.
NARROWED_UP_TO_DAYS = 366


def narrowed(days: list[date]) -> bool:
    return len(days) <= NARROWED_UP_TO_DAYS and len(days) < (last_day() - first_day()).days + 1


def _landed(spark: SparkSession, dataset: str, days: list[date]) -> landing.LandingRead:
    """The landed rows a build of `days` reads: the batches that can hold them, or, for most of the history, all."""
    batches = landing_index.batches_holding(spark, dataset, days) if narrowed(days) else None
    return landing.landing_read(spark, dataset, batches)


def build_stg_order_items(spark: SparkSession, days: list[date], read: Read) -> Staged:
    landed_read = _landed(spark, landing.ORDER_ITEMS, days)
    landed = landed_read.rows
    scans = [landed_read.scan]
    if narrowed(days):
        # Up to a year: only the items with a version on the days can be on them. Their versions are kept for the build
        # and checks, with every row breaking the contract, which quarantine files by a day of its own: one scan
        # for both.
        marked = transforms.mark_items_dated_on(landed, days)
        breaks = quarantine.breaks_contract(first_day(), last_day())
        scanned = marked.where(F.col(transforms.ITEM_ON_DAYS) | breaks).persist()
        items = scanned.where(transforms.ITEM_ON_DAYS).drop(transforms.ITEM_ON_DAYS)
        landed = scanned.drop(transforms.ITEM_ON_DAYS)
    else:
        scanned = items = landed = landed.persist()  # most of the history: read once, and indexed from that read
        landing_index.index_read(spark, landing.ORDER_ITEMS, replace(landed_read, rows=landed))
    versions, _ = quarantine.split(items, first_day(), last_day())
    _, rejected = quarantine.split(landed, first_day(), last_day())  # by quarantine day, whatever the row's key
    stg = transforms.stg_order_items(versions, days)
    quarantined = quarantine.for_days(rejected, days).persist()
    return Staged(
        table=stg,
        side_tables={QUARANTINE_ORDER_ITEMS: quarantined},
        lost=quarantine.lost_keys(items, stg, quarantined, days),
        cached=[scanned],
        scans=scans,
    )


def restate_stg_order_items(landed: LandedBatches) -> Build:
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
        on_days = read_days(spark, STG_ORDER_ITEMS, "order_date", days).select(*ORDER_ITEM_VERSION_COLUMNS)
        valid, rejected = quarantine.split(landed.rows, first_day(), last_day())
        versions = on_days.unionByName(landed.staged).unionByName(valid.select(*ORDER_ITEM_VERSION_COLUMNS))
        stg = transforms.stg_order_items(versions, days)
        read_batches = [date.fromisoformat(b) for b in landed.batches]
        from_other_batches = read_days(spark, QUARANTINE_ORDER_ITEMS, "quarantine_day", days).where(
            ~F.col("ingest_date").isin(read_batches)
        )
        quarantined = quarantine.for_days(from_other_batches, days).unionByName(quarantine.for_days(rejected, days))
        every_version = versions.unionByName(rejected.select(*ORDER_ITEM_VERSION_COLUMNS))
        quarantined = quarantined.persist()
        return Staged(
            table=stg,
            side_tables={QUARANTINE_ORDER_ITEMS: quarantined},
            lost=quarantine.lost_keys(every_version, stg, quarantined, days),
        )

    return build


def build_dim_product(spark: SparkSession, days: list[date], read: Read) -> Staged:
    landed_read = _landed(spark, landing.PRODUCTS, days)
    return Staged(
        table=transforms.dim_product_changes(landed_read.rows, first_day(), days),
        scans=[landed_read.scan],
    )


def build_fact_order_item(spark: SparkSession, days: list[date], read: Read) -> Staged:
    stg = read(STG_ORDER_ITEMS, days)
    # Each order day joins the product as of that day: every product version up to the last day.
    products = read(DIM_PRODUCT, all_days(first_day(), max(days)))
    return Staged(table=transforms.fact_order_item(stg, products), upstream=stg)


def build_daily_revenue(spark: SparkSession, days: list[date], read: Read) -> Staged:
    fact = read(FACT_ORDER_ITEM, days)
    return Staged(table=transforms.daily_revenue(fact), upstream=fact)


def build_daily_category_revenue(spark: SparkSession, days: list[date], read: Read) -> Staged:
    fact = read(FACT_ORDER_ITEM, days)
    return Staged(table=transforms.daily_category_revenue(fact), upstream=fact)


def build_customer_daily_features(spark: SparkSession, days: list[date], read: Read) -> Staged:
    fact = read(FACT_ORDER_ITEM, days)
    return Staged(table=transforms.customer_daily_features(fact), upstream=fact)


def _same_as(upstream: str, **measures: tuple[str, str]) -> Reconciliation:
    return Reconciliation(upstream, measures)


TABLES = [
    Table(
        STG_ORDER_ITEMS,
        role=Role.ORDER_GRAIN,
        key=ORDER_ITEM_KEY,
        day_column="order_date",
        # Nothing lost is checked where the landing is read: landing -> staging + quarantine. The fact then
        # reconciles with staging day by day, so a key cannot vanish anywhere without a check failing.
        checks=TableChecks(nothing_lost=NothingLost(landing.ORDER_ITEMS, QUARANTINE_ORDER_ITEMS), late_data=True),
        upstream=(LANDING_ORDER_ITEMS,),
        build=build_stg_order_items,
        restate=restate_stg_order_items,
        side_tables=(SideTable(QUARANTINE_ORDER_ITEMS, "quarantine_day"),),
        description="Current version of each order item (natural key order_id + order_item_id): duplicate deliveries "
        "removed, corrections applied, by its current order_date. Rows breaking the contract go to "
        "quarantine_order_items with the reason.",
    ),
    Table(
        DIM_PRODUCT,
        role=Role.DIMENSION,
        key=["product_id", "valid_from"],
        day_column="valid_from",
        upstream=(LANDING_PRODUCTS,),
        build=build_dim_product,
        description="Product versions by the day they take effect (valid_from): the product dimension as of any day.",
    ),
    # Day to day: a product change on day D reaches later days' facts through a restatement of the days it changes
    # (see late_data), not through a "D and every later day" mapping, which makes Dagster backfill every later day.
    Table(
        FACT_ORDER_ITEM,
        role=Role.ORDER_GRAIN,
        key=ORDER_ITEM_KEY,
        day_column="order_date",
        # Counts and amounts of the fact equal staging's, day by day.
        checks=TableChecks(
            reconciliation=_same_as(
                STG_ORDER_ITEMS,
                items=(_COUNT, _COUNT),
                gross_amount=("sum(gross_amount)", "sum(gross_amount)"),
                discount_amount=("sum(discount_amount)", "sum(discount_amount)"),
                net_amount=("sum(net_amount)", "sum(gross_amount - discount_amount)"),
            )
        ),
        upstream=(STG_ORDER_ITEMS, DIM_PRODUCT),
        build=build_fact_order_item,
        description="One row per order item, with net amount and the product's category and status as of the order "
        "day.",
    ),
    Table(
        DAILY_REVENUE,
        role=Role.MART,
        key=["order_date", "channel"],
        day_column="order_date",
        checks=TableChecks(
            reconciliation=_same_as(
                FACT_ORDER_ITEM,
                items=("sum(item_count)", _COUNT),
                gross_amount=("sum(gross_amount)", "sum(gross_amount)"),
                discount_amount=("sum(discount_amount)", "sum(discount_amount)"),
                net_amount=("sum(net_amount)", "sum(net_amount)"),
            )
        ),
        upstream=(FACT_ORDER_ITEM,),
        build=build_daily_revenue,
        description="Per order_date and channel: items, distinct orders, gross, discount, net and cost.",
    ),
    Table(
        CUSTOMER_DAILY_FEATURES,
        role=Role.MART,
        key=["customer_id", "order_date"],
        day_column="order_date",
        checks=TableChecks(
            reconciliation=_same_as(
                FACT_ORDER_ITEM, items=("sum(item_count)", _COUNT), net_amount=("sum(net_amount)", "sum(net_amount)")
            )
        ),
        upstream=(FACT_ORDER_ITEM,),
        build=build_customer_daily_features,
        description="ML feature table keyed (customer_id, order_date).",
    ),
    Table(
        DAILY_CATEGORY_REVENUE,
        role=Role.MART,
        key=["order_date", "product_category"],
        day_column="order_date",
        checks=TableChecks(
            reconciliation=_same_as(
                FACT_ORDER_ITEM,
                items=("sum(item_count)", _COUNT),
                gross_amount=("sum(gross_amount)", "sum(gross_amount)"),
                net_amount=("sum(net_amount)", "sum(net_amount)"),
            )
        ),
        upstream=(FACT_ORDER_ITEM,),
        build=build_daily_category_revenue,
        description="Per order_date and the product's category as of that day: items, distinct orders, gross and net.",
    ),
]

BY_NAME = {t.name: t for t in TABLES}


def graph_order(tables: list[Table]) -> list[str]:
    """A topological order of the tables' graph (ties in declaration order)."""
    names = {t.name for t in tables}
    order: list[str] = []
    while len(order) < len(tables):
        ready = [t.name for t in tables if t.name not in order and all(u in order for u in t.upstream if u in names)]
        if not ready:
            raise ValueError(f"the tables' upstreams form a cycle: {[t.name for t in tables if t.name not in order]}")
        order.append(ready[0])
    return order


# The order tables are published in: each after every table it reads.
PUBLISH_ORDER = graph_order(TABLES)

# Every table's day column (its partition, and what a write replaces), side tables included.
DAY_COLUMN = {
    **{t.name: t.day_column for t in TABLES},
    **{side.name: side.day_column for t in TABLES for side in t.side_tables},
}

# Where every side table belongs.
SIDE_TABLE_OF = {side.name: t.name for t in TABLES for side in t.side_tables}


def with_side_tables(tables: list[str]) -> list[str]:
    """Every table and its side tables, a side table just before its table (as a change commits them)."""
    return [name for t in tables for name in [*(s.name for s in BY_NAME[t].side_tables), t]]


def built_from_landing(dataset: str) -> Table:
    """The table built directly from a landing dataset: where its batches first reach the lake."""
    return next(t for t in TABLES if t.landing_dataset == dataset)


def downstream(tables: set[str]) -> list[str]:
    """`tables` and every table built from them, in publish order."""
    found = set(tables)
    for name in PUBLISH_ORDER:
        if any(u in found for u in BY_NAME[name].upstream):
            found.add(name)
    return [t for t in PUBLISH_ORDER if t in found]


def upstream_of(table: str) -> set[str]:
    """Every table `table` is built from, directly or not."""
    found: set[str] = set()
    stack = [table]
    while stack:
        for up in BY_NAME[stack.pop()].upstream:
            if up in BY_NAME and up not in found:
                found.add(up)
                stack.append(up)
    return found
