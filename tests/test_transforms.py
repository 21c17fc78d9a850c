"""The orders pipeline's rules and the machinery's staging on hand-made rows, with real Spark."""

from datetime import date, datetime
from decimal import Decimal

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from assets_pkg import transforms
from exact_backfills import builds, quarantine
from exact_backfills.checks import distinct_keys_by_day
from exact_backfills.landing import REFUSED
from exact_backfills.landing_index import KEY_VERSIONS
from exact_backfills.partitions import days
from tests.support.orders import ORDER_ITEMS, ORDERS, PRODUCTS

ORDER_ITEM_SCHEMA, PRODUCT_SCHEMA = ORDER_ITEMS.schema, PRODUCTS.schema

D = date.fromisoformat


PRODUCT_CHANGES = (
    "product_id long, valid_from date, category string, status string, list_price decimal(18,2), updated_at timestamp"
)


def ts(s):
    return datetime.fromisoformat(s)


def item(order_id, item_id, day, quantity, updated, ingested, source="b1/f.parquet", product_id=1):
    gross = Decimal(quantity * 10).quantize(Decimal("0.01"))
    return (
        order_id,
        item_id,
        D(day),
        7,
        product_id,
        "web",
        quantity,
        gross,
        Decimal("1.00"),
        Decimal("6.00"),
        ts(updated),
        ts(ingested),
        D(ingested[:10]),
        source,
    )


@pytest.fixture(scope="module")
def versions_schema():
    return T.StructType(
        [
            *ORDER_ITEM_SCHEMA.fields,
            T.StructField("ingest_date", T.DateType()),
            T.StructField("source_file", T.StringType()),
        ]
    )


def stg(spark, schema, rows, start, end):
    df = spark.createDataFrame(rows, schema)
    return {
        (r.order_id, r.order_item_id): r
        for r in builds.current_versions(ORDER_ITEMS, df, days(D(start), D(end))).collect()
    }


def test_duplicate_deliveries_collapse_to_one_row(spark, versions_schema):
    row = item(1, 1, "2025-01-05", 2, "2025-01-05 10:00:00", "2025-01-06 01:00:00")
    out = stg(spark, versions_schema, [row, row, row], "2025-01-05", "2025-01-05")
    assert list(out) == [(1, 1)]


def test_the_latest_updated_at_wins_then_the_latest_ingested_at(spark, versions_schema):
    rows = [
        item(1, 1, "2025-01-05", 2, "2025-01-05 10:00:00", "2025-01-06 01:00:00"),
        item(1, 1, "2025-01-05", 5, "2025-01-09 00:30:00", "2025-01-09 01:00:00"),  # correction
        item(1, 1, "2025-01-05", 3, "2025-01-07 00:00:00", "2025-01-12 01:00:00"),  # older version, landed last
        item(2, 1, "2025-01-05", 4, "2025-01-05 10:00:00", "2025-01-06 01:00:00"),
        item(2, 1, "2025-01-05", 6, "2025-01-05 10:00:00", "2025-01-08 01:00:00"),  # same updated_at, landed later
    ]
    out = stg(spark, versions_schema, rows, "2025-01-01", "2025-01-31")
    assert out[(1, 1)].quantity == 5
    assert out[(2, 1)].quantity == 6


def test_a_key_whose_latest_version_is_on_a_day_but_in_neither_staging_nor_quarantine_is_lost(spark, versions_schema):
    rows = [
        item(1, 1, "2025-01-05", 2, "2025-01-05 10:00:00", "2025-01-06 01:00:00"),  # staged
        item(2, 1, "2025-01-05", 2, "2025-01-05 10:00:00", "2025-01-06 01:00:00"),  # vanished
        item(3, 1, "2025-01-05", 2, "2025-01-05 10:00:00", "2025-01-06 01:00:00"),  # quarantined
        item(4, 1, "2025-01-05", 2, "2025-01-05 10:00:00", "2025-01-06 01:00:00"),  # moved to a day not rebuilt...
        item(4, 1, "2025-01-20", 2, "2025-01-09 10:00:00", "2025-01-10 01:00:00"),  # ... by this correction
    ]
    versions = spark.createDataFrame(rows, versions_schema)
    staged = versions.where("order_id = 1")
    quarantined = versions.where("order_id = 3")
    lost = quarantine.lost_keys(ORDER_ITEMS, versions, staged, quarantined, [D("2025-01-05")]).collect()
    assert [(r.day, r.order_id, r.order_item_id) for r in lost] == [(D("2025-01-05"), 2, 1)]


def test_one_pass_by_key_marks_what_staging_holds_and_what_the_nothing_lost_check_expects(spark, versions_schema):
    rows = [
        item(1, 1, "2025-01-05", 2, "2025-01-05 10:00:00", "2025-01-06 01:00:00"),  # staged...
        item(1, 1, "2025-01-05", -1, "2025-01-08 10:00:00", "2025-01-09 01:00:00"),  # ...under a newer version refused
        item(2, 1, "2025-01-06", 2, "2025-01-06 10:00:00", "2025-01-07 01:00:00"),
        item(2, 1, "2025-01-20", 3, "2025-01-21 10:00:00", "2025-01-21 11:00:00"),  # moved by a correction
        item(3, 1, "2025-01-07", -1, "2025-01-07 10:00:00", "2025-01-08 01:00:00"),  # only ever refused
        item(4, 1, "2025-01-07", 2, "2025-01-07 10:00:00", "2025-01-08 01:00:00"),
    ]
    landed = spark.createDataFrame(rows, versions_schema).withColumn(REFUSED, F.lit(None).cast("string"))
    marked = builds.by_key(ORDER_ITEMS, landed, ORDERS.partitions).collect()

    def marked_as(mark):
        return {(r.order_id, r.order_date, r.quantity) for r in marked if r[mark]}

    assert marked_as(builds.LATEST_VALID) == {(1, D("2025-01-05"), 2), (2, D("2025-01-20"), 3), (4, D("2025-01-07"), 2)}
    assert marked_as(builds.LATEST) == {
        (1, D("2025-01-05"), -1),
        (2, D("2025-01-20"), 3),
        (3, D("2025-01-07"), -1),
        (4, D("2025-01-07"), 2),
    }
    assert {r.order_id: r[KEY_VERSIONS] for r in marked} == {1: 2, 2: 2, 3: 1, 4: 1}
    # What staging and the nothing-lost check each choose on their own, over every day.
    every = ORDERS.partitions.days
    valid, _ = quarantine.split(ORDER_ITEMS, landed, ORDERS.partitions)
    staged = builds.current_versions(ORDER_ITEMS, valid, every).collect()
    assert {(r.order_id, r.order_date, r.quantity) for r in staged} == marked_as(builds.LATEST_VALID)
    expected = quarantine.latest_landed(ORDER_ITEMS, landed, every).collect()
    assert {(r.order_id, r.day) for r in expected} == {(k, d) for k, d, _ in marked_as(builds.LATEST)}


def test_equal_timestamps_resolve_the_same_way_whatever_the_row_order(spark, versions_schema):
    a = item(1, 1, "2025-01-05", 2, "2025-01-05 10:00:00", "2025-01-06 01:00:00")
    b = item(1, 1, "2025-01-05", 9, "2025-01-05 10:00:00", "2025-01-06 01:00:00")
    first = stg(spark, versions_schema, [a, b], "2025-01-05", "2025-01-05")[(1, 1)].quantity
    second = stg(spark, versions_schema, [b, a], "2025-01-05", "2025-01-05")[(1, 1)].quantity
    assert first == second


def test_a_correction_that_moves_an_item_to_another_day_removes_it_from_its_old_day(spark, versions_schema):
    rows = [
        item(1, 1, "2025-01-05", 2, "2025-01-05 10:00:00", "2025-01-06 01:00:00"),
        item(1, 1, "2025-01-20", 2, "2025-01-21 00:30:00", "2025-01-21 01:00:00"),
    ]
    assert stg(spark, versions_schema, rows, "2025-01-01", "2025-01-10") == {}
    assert stg(spark, versions_schema, rows, "2025-01-15", "2025-01-25")[(1, 1)].order_date == D("2025-01-20")


def test_narrowed_to_a_days_items_a_moved_item_keeps_all_its_versions_and_leaves_the_day(spark, versions_schema):
    rows = [
        item(1, 1, "2025-01-05", 2, "2025-01-05 10:00:00", "2025-01-06 01:00:00"),
        item(1, 1, "2025-01-20", 2, "2025-01-21 00:30:00", "2025-01-21 01:00:00"),  # moved by this correction
        item(2, 1, "2025-01-07", 2, "2025-01-07 10:00:00", "2025-01-08 01:00:00"),  # never on the day
    ]
    versions = spark.createDataFrame(rows, versions_schema)
    marked = builds.mark_keys_dated_on(ORDER_ITEMS, versions, [D("2025-01-05")])
    narrowed = marked.where(builds.KEY_ON_DAYS).drop(builds.KEY_ON_DAYS)
    assert sorted((r.order_id, r.order_date) for r in narrowed.collect()) == [
        (1, D("2025-01-05")),
        (1, D("2025-01-20")),
    ]
    assert builds.current_versions(ORDER_ITEMS, narrowed, [D("2025-01-05")]).count() == 0


def test_an_old_day_rerun_sees_the_product_as_it_was_that_day(spark, versions_schema):
    """Seed 001: the product turned PASSIVE on Jan 10; re-running Jan 5 still says ACTIVE."""
    products = spark.createDataFrame(
        [
            (
                1,
                "toys",
                "ACTIVE",
                Decimal("10.00"),
                ts("2025-01-01 00:00:00"),
                ts("2025-01-01 00:01:00"),
                D("2025-01-01"),
                "p1",
            ),
            (
                1,
                "toys",
                "PASSIVE",
                Decimal("10.00"),
                ts("2025-01-10 09:00:00"),
                ts("2025-01-10 23:00:00"),
                D("2025-01-10"),
                "p2",
            ),
        ],
        T.StructType(
            [
                *PRODUCT_SCHEMA.fields,
                T.StructField("ingest_date", T.DateType()),
                T.StructField("source_file", T.StringType()),
            ]
        ),
    )
    changes = builds.dimension_versions(PRODUCTS, products, D("2025-01-01"), days(D("2025-01-01"), D("2025-01-31")))
    items = spark.createDataFrame(
        [
            item(1, 1, "2025-01-05", 2, "2025-01-05 10:00:00", "2025-01-06 01:00:00"),
            item(2, 1, "2025-01-12", 2, "2025-01-12 10:00:00", "2025-01-13 01:00:00"),
        ],
        versions_schema,
    ).drop("ingest_date", "source_file")
    fact = {r.order_id: r for r in transforms.fact_order_item(items, changes).collect()}
    assert (fact[1].product_status, fact[2].product_status) == ("ACTIVE", "PASSIVE")
    assert fact[1].net_amount == Decimal("19.00")
    assert len(fact) == 2  # the as-of join neither drops nor doubles an item


def test_revenue_and_customer_features_count_distinct_orders_and_products_per_group(spark, versions_schema):
    items = spark.createDataFrame(
        [
            item(1, 1, "2025-01-05", 2, "2025-01-05 10:00:00", "2025-01-06 01:00:00", product_id=1),
            item(1, 2, "2025-01-05", 1, "2025-01-05 10:00:00", "2025-01-06 01:00:00", product_id=1),
            item(2, 1, "2025-01-05", 3, "2025-01-05 11:00:00", "2025-01-06 01:00:00", product_id=2),
            item(3, 1, "2025-01-06", 1, "2025-01-06 11:00:00", "2025-01-07 01:00:00", product_id=2),
        ],
        versions_schema,
    ).drop("ingest_date", "source_file")
    changes = spark.createDataFrame(
        [],
        PRODUCT_CHANGES,
    )
    fact = transforms.fact_order_item(items, changes)
    revenue = {r.order_date: r for r in transforms.daily_revenue(fact).collect()}
    assert [(r.item_count, r.order_count) for _, r in sorted(revenue.items())] == [(3, 2), (1, 1)]
    features = {r.order_date: r for r in transforms.customer_daily_features(fact).collect()}  # one customer (7)
    assert [(r.item_count, r.order_count, r.distinct_products) for _, r in sorted(features.items())] == [
        (3, 2, 2),
        (1, 1, 1),
    ]
    assert dict(transforms.customer_daily_features(fact).dtypes)["order_count"] == "bigint"


def test_category_revenue_groups_by_the_products_category_as_of_the_order_day(spark, versions_schema):
    items = spark.createDataFrame(
        [
            item(1, 1, "2025-01-05", 2, "2025-01-05 10:00:00", "2025-01-06 01:00:00", product_id=1),
            item(2, 1, "2025-01-05", 1, "2025-01-05 11:00:00", "2025-01-06 01:00:00", product_id=2),
            item(3, 1, "2025-01-09", 1, "2025-01-09 11:00:00", "2025-01-10 01:00:00", product_id=1),
        ],
        versions_schema,
    ).drop("ingest_date", "source_file")
    changes = spark.createDataFrame(
        [
            (1, date(2025, 1, 1), "books", "ACTIVE", None, None),
            (2, date(2025, 1, 1), "books", "ACTIVE", None, None),
            (1, date(2025, 1, 8), "toys", "ACTIVE", None, None),
        ],  # product 1 moves to toys from Jan 8
        PRODUCT_CHANGES,
    )
    fact = transforms.fact_order_item(items, changes)
    by_day = sorted(
        (r.order_date.isoformat(), r.product_category, r.item_count, r.order_count)
        for r in transforms.daily_category_revenue(fact).collect()
    )
    assert by_day == [("2025-01-05", "books", 2, 2), ("2025-01-09", "toys", 1, 1)]


def test_a_days_fingerprint_depends_on_its_rows_and_not_on_their_order(spark):
    from exact_backfills import Table
    from exact_backfills.checks import day_contents, evaluate_blocking

    schema = "order_date date, order_id long, amount decimal(18,2)"
    rows = [(D("2025-01-01"), i, Decimal(i)) for i in range(1, 50)] + [(D("2025-01-02"), 1, Decimal("1.00"))]

    def contents_of(rows, schema, partitions=1):
        return day_contents(spark.createDataFrame(rows, schema).repartition(partitions), "order_date")

    def contents(rows, partitions=1):
        return contents_of(rows, schema, partitions)

    published = contents(rows)
    assert contents(list(reversed(rows)), partitions=3) == published  # the same rows, in another order
    day = D("2025-01-01")
    changed_amount = [(d, i, a + 1 if i == 7 else a) for d, i, a in rows]
    swapped_amounts = [(d, i, Decimal(8) if i == 7 else Decimal(7) if i == 8 else a) for d, i, a in rows]
    duplicated = [*rows, rows[0]]
    for other in (changed_amount, swapped_amounts, duplicated):
        assert contents(other)[day] != published[day]
        assert contents(other)[D("2025-01-02")] == published[D("2025-01-02")]  # another day's rows, unchanged
    # A value moved from one column to another (a null left behind) is another row.
    nullable = "order_date date, a long, b long, tags map<string,string>"
    moved = [contents_of([(day, 1, None, {"k": "v"})], nullable), contents_of([(day, None, 1, {"k": "v"})], nullable)]
    assert moved[0][day] != moved[1][day]
    assert contents_of([(day, 1, None, {"k": "w"})], nullable)[day] != moved[0][day]  # a map's values count too
    # The checks record the same fingerprint, from the same pass as their counts.
    table = Table("t", key=["order_id"], day_column="order_date", upstream={}, build=lambda *_: None)
    verified = evaluate_blocking(spark.createDataFrame(rows, schema), table, sorted(published))
    assert {d: verified.profile(d).content for d in published} == published


def test_a_table_reconciles_with_measures_its_upstreams_checks_computed_as_with_the_upstreams_rows(spark):
    from exact_backfills import Reconcile, SameDay, Table
    from exact_backfills.checks import RECONCILES, Upstream, evaluate_blocking

    jan1, jan2, jan3 = D("2025-01-01"), D("2025-01-02"), D("2025-01-03")
    items = spark.createDataFrame(
        [(jan1, 1, Decimal("2.50")), (jan1, 2, Decimal("1.00")), (jan2, 3, Decimal("4.00"))],
        "order_date date, order_id long, amount decimal(18,2)",
    )
    # Jan 1 right; Jan 2 one cent off; Jan 3 has a row of no item.
    daily = spark.createDataFrame(
        [(jan1, 2, Decimal("3.50")), (jan2, 1, Decimal("4.01")), (jan3, 1, Decimal("1.00"))],
        "order_date date, item_count long, amount decimal(18,2)",
    )
    upstream = Table("items", key=["order_id"], day_column="order_date", upstream={}, build=lambda *_: None)
    reconcile = Reconcile("items", {"items": ("sum(item_count)", "count(1)"), "amount": ("sum(amount)", "sum(amount)")})
    table = Table(
        "daily",
        key=["order_date"],
        day_column="order_date",
        upstream={"items": SameDay()},
        build=lambda *_: None,
        reconcile=reconcile,
    )
    days = [jan1, jan2, jan3]
    checked = evaluate_blocking(items, upstream, days, downstream={"daily": reconcile})
    handed = evaluate_blocking(daily, table, days, Upstream(measures=checked.for_downstream["daily"]))
    aggregated = evaluate_blocking(daily, table, days, Upstream(items, "order_date"))

    def reconciles(verified):
        return {o.day: (o.passed, o.metadata["mismatches"]) for o in verified.outcomes if o.check == RECONCILES}

    assert (
        reconciles(handed)
        == reconciles(aggregated)
        == {
            jan1: (True, ""),
            jan2: (False, "amount: 4.01 vs 4.00"),
            jan3: (False, "items: 1 vs 0, amount: 1.00 vs 0"),
        }
    )


def test_a_tables_cached_rows_are_kept_by_day_so_that_writing_or_grouping_them_by_day_exchanges_none(spark):
    import io
    from contextlib import redirect_stdout

    from exact_backfills.builds import Staged
    from exact_backfills.publish import Change, Operation, cached, checkpointed
    from tests.support.orders import BY_NAME, FACT_ORDER_ITEM, ORDERS

    def above_the_cache(df) -> str:
        plan = io.StringIO()
        with redirect_stdout(plan):
            df.explain()
        return plan.getvalue().split("== Physical Plan ==")[-1].split("InMemoryTableScan")[0]

    def exchanged_above_the_cache(df) -> bool:
        return "Exchange" in above_the_cache(df)

    def sorted_above_the_cache(df) -> bool:
        return "Sort [" in above_the_cache(df)

    every_day = ORDERS.partitions.days
    change = Change(Operation.BACKFILL, {FACT_ORDER_ITEM: every_day})
    assert not checkpointed(ORDERS, BY_NAME[FACT_ORDER_ITEM], change, [])  # the rows of most of the history: cached
    rows = spark.range(1000).select(
        F.date_add(F.lit(every_day[0]), (F.col("id") % 40).cast("int")).alias("order_date"),
        F.col("id").alias("order_id"),
        F.lit(1).alias("order_item_id"),
        (F.col("id") % 7).alias("customer_id"),
    )
    assert exchanged_above_the_cache(rows.repartition("order_date"))  # the probe sees an exchange where there is one
    kept = cached(ORDERS, Staged(table=rows), BY_NAME[FACT_ORDER_ITEM], change)
    try:
        assert kept.table.count() == 1000
        # What overwrite_days writes, the checks' distinct keys of a day, a downstream table grouped by a day.
        assert not exchanged_above_the_cache(kept.table.repartition("order_date"))
        key = ["order_id", "order_item_id"]
        assert not exchanged_above_the_cache(distinct_keys_by_day(kept.table, key, "order_date"))
        assert not exchanged_above_the_cache(kept.table.groupBy("customer_id", "order_date").count())
        # Sorted by day and key once: the write's order by day (what it asks of its rows) sorts nothing again.
        assert sorted_above_the_cache(rows.repartition("order_date").sortWithinPartitions("order_date"))
        assert not sorted_above_the_cache(kept.table.repartition("order_date").sortWithinPartitions("order_date"))
    finally:
        kept.unpersist()


def test_a_table_reads_its_upstream_through_one_overlay_of_the_writes_own_days_over_the_published_ones(spark):
    """What a change (publish) and a plan (plans) read of an upstream: their own rows on the days they have them,
    the published ones elsewhere, one read each; rows of two code versions (a plan's) may differ by a column."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import DataFrame

    from exact_backfills.write_path.staging import overlay

    jan1, jan2, jan3 = D("2025-01-01"), D("2025-01-02"), D("2025-01-03")
    asked: list[tuple[str, str, list]] = []

    def own(upstream: str, days_: list) -> DataFrame:  # its rows have a column the published ones have not
        asked.append(("own", upstream, days_))
        return spark.createDataFrame([(d, 2, "new") for d in days_], "day date, n long, added string")

    def published(upstream: str, days_: list) -> DataFrame:
        asked.append(("published", upstream, days_))
        return spark.createDataFrame([(d, 1) for d in days_], "day date, n long")

    plan = overlay({"up": [jan2]}, own, published, across_code_versions=True)
    read = plan("up", [jan1, jan2, jan3])
    assert sorted(read.collect()) == [(jan1, 1, None), (jan2, 2, "new"), (jan3, 1, None)]
    assert asked == [("own", "up", [jan2]), ("published", "up", [jan1, jan3])]

    asked.clear()  # an upstream the write has no rows of: published alone; only its own days: nothing published
    assert [r.n for r in plan("other", [jan1]).collect()] == [1] and asked == [("published", "other", [jan1])]
    asked.clear()
    assert [r.n for r in plan("up", [jan2]).collect()] == [2] and asked == [("own", "up", [jan2])]

    change = overlay({"up": [jan2]}, own, published, published_exists=lambda _: False)
    assert [r.n for r in change("up", [jan1, jan2]).collect()] == [2]  # nothing published yet: its own rows alone
    assert change("up", [jan1]).collect() == []  # none of its days and nothing published: no row
    with pytest.raises(AnalysisException):  # one code version: a column only one side has is an error, not a null
        overlay({"up": [jan2]}, own, published)("up", [jan1, jan2]).collect()
