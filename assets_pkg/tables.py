"""Every table of the lake, declared once: its name, day column, natural key, upstream tables, build and checks.
The Dagster assets and their checks, the order tables are published in, the CLI's table list and the tests' table
facts are all derived from `TABLES`.

A build turns the days to write into rows, `build(spark, days, read) -> Staged`, reading its upstream tables only
through `read(table, days)`: the rows the same run builds for them, or what is published (see publish.py)."""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from assets_pkg import landing, landing_index, quarantine, transforms
from assets_pkg.checks import Outcome, Reconciliation, TableChecks
from assets_pkg.landing import ORDER_ITEM_KEY
from assets_pkg.partitions import days as all_days
from assets_pkg.partitions import first_day, last_day
from resources.delta_io import Scan

LANDING_ORDER_ITEMS = "landing_order_items"
LANDING_PRODUCTS = "landing_products"
STG_ORDER_ITEMS = "stg_order_items"
QUARANTINE_ORDER_ITEMS = "quarantine_order_items"
DIM_PRODUCT = "dim_product"
FACT_ORDER_ITEM = "fact_order_item"
DAILY_REVENUE = "daily_revenue"
CUSTOMER_DAILY_FEATURES = "customer_daily_features"
DAILY_CATEGORY_REVENUE = "daily_category_revenue"

# Roles: what a table's days hold, and so which days a landed batch makes stale in it.
ORDER_GRAIN = "order-grain"  # rows of order items, by order day: stale on the days of the order items that change
DIMENSION = "dimension"  # versions by the day they take effect
MART = "mart"  # aggregates of order-grain rows by order day: stale with them

_COUNT = "count(1)"

Read = Callable[[str, list[date]], DataFrame]
AfterCommit = Callable[[SparkSession, list[date], str, datetime], list[Outcome]]


@dataclass
class Staged:
    """What a table's build produces for its days, before anything is written."""

    table: DataFrame
    upstream: DataFrame | None = None  # the upstream rows it must reconcile with
    lost: DataFrame | None = None  # keys that should be in the table (or quarantine) but are not
    side_tables: dict[str, DataFrame] = field(default_factory=dict)  # written with it, e.g. quarantine
    persisted: list[DataFrame] = field(default_factory=list)  # inputs read once for the build, checks and writes
    scans: list[Scan] = field(default_factory=list)  # what its reads of the landing and of published tables scan
    # Called once the table's days are committed, with (spark, days, run_id, now): more check results for those
    # days (late data: see late_data.exceptions_after_publish).
    after_commit: "AfterCommit | None" = None


Build = Callable[[SparkSession, list[date], Read], Staged]


@dataclass(frozen=True)
class Table:
    name: str
    role: str
    checks: TableChecks  # its natural key and day column are the checks'
    upstream: tuple[str, ...]  # the tables (or landing assets) it is built from
    build: Build
    description: str
    side_tables: dict[str, str] = field(default_factory=dict)  # name -> day column, written with the table

    @property
    def day_column(self) -> str:
        return self.checks.day_column

    @property
    def key(self) -> list[str]:
        return self.checks.key


# Up to this many days (a chunk), a build reads only the landed batches that can hold rows of its days (see
# landing_index), and staging only the items that have a version on them (their keys broadcast: a year of TPC-H SF1's
# keys is about 900,000); above it, or over every partition day, the whole landing once.
NARROWED_UP_TO_DAYS = 366


def _narrowed(days: list[date]) -> bool:
    return len(days) <= NARROWED_UP_TO_DAYS and len(days) < (last_day() - first_day()).days + 1


def _landed(spark: SparkSession, dataset: str, days: list[date]) -> DataFrame:
    """The landed rows a build of `days` reads: the batches that can hold them, or, for most of the history, all."""
    return landing.read_landing(spark, dataset, landing_index.batches_holding(spark, dataset, days) if _narrowed(days) else None)


def build_stg_order_items(spark: SparkSession, days: list[date], read: Read) -> Staged:
    landed = _landed(spark, landing.ORDER_ITEMS, days)
    scans = [landing.scan_of_landing(landed, landing.ORDER_ITEMS)]
    if _narrowed(days):
        # A chunk: only the items with a version on the days can be on them. Their versions are kept for the build
        # and checks, with every row breaking the contract, which quarantine files by a day of its own: one scan
        # for both.
        marked = transforms.mark_items_dated_on(landed, days)
        scanned = marked.where(F.col(transforms.ITEM_ON_DAYS) | quarantine.breaks_contract(first_day(), last_day())).persist()
        items = scanned.where(transforms.ITEM_ON_DAYS).drop(transforms.ITEM_ON_DAYS)
        landed = scanned.drop(transforms.ITEM_ON_DAYS)
    else:
        scanned = items = landed = landed.persist()  # most of the history: read once
    versions, _ = quarantine.split(items, first_day(), last_day())
    _, rejected = quarantine.split(landed, first_day(), last_day())  # by quarantine day, whatever the row's key
    stg = transforms.stg_order_items(versions, days)
    quarantined = quarantine.for_days(rejected, days).persist()
    from assets_pkg import late_data  # which builds on this module

    return Staged(
        table=stg,
        side_tables={QUARANTINE_ORDER_ITEMS: quarantined},
        lost=quarantine.lost_keys(items, stg, quarantined, days),
        persisted=[scanned, quarantined],
        scans=scans,
        # Built from every batch that can hold its days: it publishes every late row of its days, so their exceptions
        # are resolved.
        after_commit=late_data.exceptions_after_publish(resolve=True),
    )


def build_dim_product(spark: SparkSession, days: list[date], read: Read) -> Staged:
    versions = _landed(spark, landing.PRODUCTS, days)
    return Staged(table=transforms.dim_product_changes(versions, first_day(), days),
                  scans=[landing.scan_of_landing(versions, landing.PRODUCTS)])


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
        role=ORDER_GRAIN,
        # Nothing lost is checked where the landing is read: landing -> staging + quarantine. The fact then
        # reconciles with staging day by day, so a key cannot vanish anywhere without a check failing.
        checks=TableChecks(key=ORDER_ITEM_KEY, day_column="order_date", nothing_lost=True, late_data=True),
        upstream=(LANDING_ORDER_ITEMS,),
        build=build_stg_order_items,
        side_tables={QUARANTINE_ORDER_ITEMS: "quarantine_day"},
        description="Current version of each order item (natural key order_id + order_item_id): duplicate deliveries "
        "removed, corrections applied, by its current order_date. Rows breaking the contract go to "
        "quarantine_order_items with the reason.",
    ),
    Table(
        DIM_PRODUCT,
        role=DIMENSION,
        checks=TableChecks(key=["product_id", "valid_from"], day_column="valid_from"),
        upstream=(LANDING_PRODUCTS,),
        build=build_dim_product,
        description="Product versions by the day they take effect (valid_from): the product dimension as of any day.",
    ),
    # Day to day: a product change on day D reaches later days' facts through a restatement of the days it changes
    # (see late_data), not through a "D and every later day" mapping, which makes Dagster backfill every later day.
    Table(
        FACT_ORDER_ITEM,
        role=ORDER_GRAIN,
        checks=TableChecks(
            key=ORDER_ITEM_KEY,
            day_column="order_date",
            # Counts and amounts of the fact equal staging's, day by day.
            reconciliation=_same_as(
                STG_ORDER_ITEMS,
                items=(_COUNT, _COUNT),
                gross_amount=("sum(gross_amount)", "sum(gross_amount)"),
                discount_amount=("sum(discount_amount)", "sum(discount_amount)"),
                net_amount=("sum(net_amount)", "sum(gross_amount - discount_amount)"),
            ),
        ),
        upstream=(STG_ORDER_ITEMS, DIM_PRODUCT),
        build=build_fact_order_item,
        description="One row per order item, with net amount and the product's category and status as of the order day.",
    ),
    Table(
        DAILY_REVENUE,
        role=MART,
        checks=TableChecks(
            key=["order_date", "channel"],
            day_column="order_date",
            reconciliation=_same_as(
                FACT_ORDER_ITEM,
                items=("sum(item_count)", _COUNT),
                gross_amount=("sum(gross_amount)", "sum(gross_amount)"),
                discount_amount=("sum(discount_amount)", "sum(discount_amount)"),
                net_amount=("sum(net_amount)", "sum(net_amount)"),
            ),
        ),
        upstream=(FACT_ORDER_ITEM,),
        build=build_daily_revenue,
        description="Per order_date and channel: items, distinct orders, gross, discount, net and cost.",
    ),
    Table(
        CUSTOMER_DAILY_FEATURES,
        role=MART,
        checks=TableChecks(
            key=["customer_id", "order_date"],
            day_column="order_date",
            reconciliation=_same_as(
                FACT_ORDER_ITEM, items=("sum(item_count)", _COUNT), net_amount=("sum(net_amount)", "sum(net_amount)")
            ),
        ),
        upstream=(FACT_ORDER_ITEM,),
        build=build_customer_daily_features,
        description="ML feature table keyed (customer_id, order_date).",
    ),
    Table(
        DAILY_CATEGORY_REVENUE,
        role=MART,
        checks=TableChecks(
            key=["order_date", "product_category"],
            day_column="order_date",
            reconciliation=_same_as(
                FACT_ORDER_ITEM,
                items=("sum(item_count)", _COUNT),
                gross_amount=("sum(gross_amount)", "sum(gross_amount)"),
                net_amount=("sum(net_amount)", "sum(net_amount)"),
            ),
        ),
        upstream=(FACT_ORDER_ITEM,),
        build=build_daily_category_revenue,
        description="Per order_date and the product's category as of that day: items, distinct orders, gross and net.",
    ),
]

BY_NAME = {t.name: t for t in TABLES}
LANDING_ASSETS = (LANDING_ORDER_ITEMS, LANDING_PRODUCTS)


def _graph_order() -> list[str]:
    """A topological order of the tables' graph (ties in declaration order)."""
    order: list[str] = []
    while len(order) < len(TABLES):
        ready = [t.name for t in TABLES if t.name not in order and all(u in order for u in t.upstream if u in BY_NAME)]
        if not ready:
            raise ValueError(f"the tables' upstreams form a cycle: {[t.name for t in TABLES if t.name not in order]}")
        order.append(ready[0])
    return order


# The order tables are published in: each after every table it reads.
PUBLISH_ORDER = _graph_order()

# Every table's day column (its partition, and what overwrite_days replaces), side tables included.
DAY_COLUMN = {
    **{t.name: t.day_column for t in TABLES},
    **{side: column for t in TABLES for side, column in t.side_tables.items()},
}

TABLE_CHECKS = {t.name: t.checks for t in TABLES}


def downstream(tables: set[str]) -> list[str]:
    """`tables` and every table built from them, in publish order."""
    found = set(tables)
    for name in PUBLISH_ORDER:
        if any(u in found for u in BY_NAME[name].upstream):
            found.add(name)
    return [t for t in PUBLISH_ORDER if t in found]
