"""How a table's columns change between what is published and what the code loaded now builds (the plan's schema
diff), and when such a change can be promoted: only over every day the table holds."""

from datetime import date, timedelta

from pyspark.sql import types as T

from exact_backfills.key_changes import KeyChange
from exact_backfills.plans import TablePlan, reshape_refusals
from resources.delta_io import SchemaDiff

PUBLISHED = T.StructType(
    [
        T.StructField("order_date", T.DateType()),
        T.StructField("channel", T.StringType()),
        T.StructField("net_amount", T.DecimalType(18, 2)),
        T.StructField("note", T.StringType()),
    ]
)


def test_the_same_columns_in_another_order_or_nullability_are_no_change_of_shape():
    reordered = T.StructType([T.StructField(f.name, f.dataType, nullable=False) for f in reversed(PUBLISHED.fields)])
    assert not SchemaDiff.between(PUBLISHED, reordered)
    assert SchemaDiff.between(PUBLISHED, reordered).describe() == "none"


def test_a_column_added_dropped_and_retyped_are_each_named_with_their_types():
    built = T.StructType(
        [
            T.StructField("order_date", T.DateType()),
            T.StructField("channel", T.StringType()),
            T.StructField("net_amount", T.DecimalType(20, 2)),
            T.StructField("max_quantity", T.IntegerType()),
        ]
    )
    shape = SchemaDiff.between(PUBLISHED, built)
    assert shape == SchemaDiff(
        added={"max_quantity": "int"},
        dropped={"note": "string"},
        retyped={"net_amount": ("decimal(18,2)", "decimal(20,2)")},
    )
    assert shape.describe() == (
        "added max_quantity (int), dropped note (string), retyped net_amount (decimal(18,2) → decimal(20,2))"
    )
    assert SchemaDiff.from_json(shape.to_json()) == shape
    assert SchemaDiff.from_json(None) == SchemaDiff()  # a plan recorded before plans had a schema diff


def _reshaped(shape: SchemaDiff | None = None, key: KeyChange | None = None) -> TablePlan:
    return TablePlan("v1", "v2", [], [], schema=shape or SchemaDiff(), key=key)


def test_a_change_of_shape_planned_over_some_days_is_refused_in_one_line_naming_the_range_to_plan():
    days = [date(2025, 1, 1) + timedelta(days=i) for i in range(10)]
    added = _reshaped(SchemaDiff(added={"max_quantity": "int"}))
    assert reshape_refusals("daily_revenue", added, days, days) == []
    assert reshape_refusals("daily_revenue", _reshaped(), days[:3], days) == []  # the same shape: some days are fine
    (refused,) = reshape_refusals("daily_revenue", added, days[:3], days)
    assert refused == (
        "daily_revenue's columns change (added max_quantity (int)): a change of shape rewrites every day of the "
        "table, and this plan covers 3 of its 10 day(s); plan --start 2025-01-01 --end 2025-01-10"
    )


def test_a_changed_key_is_a_change_of_shape_named_with_both_keys():
    days = [date(2025, 1, 1) + timedelta(days=i) for i in range(10)]
    key = KeyChange(("order_date", "channel"), ("order_date", "channel", "product_category"))
    assert KeyChange.from_json(key.to_json()) == key
    assert KeyChange.from_json(None) is None  # a plan recorded before plans had keys
    both = _reshaped(SchemaDiff(added={"product_category": "string"}), key)
    assert both.reshaped == (
        "columns change (added product_category (string)); key changes (order_date, channel → order_date, channel, "
        "product_category)"
    )
    (refused,) = reshape_refusals("daily_revenue", _reshaped(key=key), days[5:], days)
    assert refused.startswith("daily_revenue's key changes (order_date, channel → order_date, channel, product_cat")
    assert refused.endswith("this plan covers 5 of its 10 day(s); plan --start 2025-01-01 --end 2025-01-10")


def _days(first: date, n: int) -> list[date]:
    return [first + timedelta(days=i) for i in range(n)]


def test_a_table_just_declared_is_never_built_on_exactly_the_days_every_table_it_is_built_from_has(monkeypatch):
    from assets_pkg.pipeline import DAILY_CATEGORY_REVENUE, DAILY_REVENUE, DIM_PRODUCT, FACT_ORDER_ITEM, STG_ORDER_ITEMS
    from assets_pkg.pipeline import pipeline as orders
    from exact_backfills.verification import never_built

    monkeypatch.setenv("PARTITION_START_DATE", "2025-01-01")
    monkeypatch.setenv("PARTITION_END_DATE", "2025-01-31")
    built = {t: _days(date(2025, 1, 1), 20) for t in orders.publish_order}
    assert never_built(orders, built, date(2025, 1, 31)) == {}  # a backfill builds every table on the same days
    # The mart just declared has no day; the fact had a day more, from a backfill that selected it and staging.
    built[DAILY_CATEGORY_REVENUE] = []
    built[STG_ORDER_ITEMS] = built[DIM_PRODUCT] = built[FACT_ORDER_ITEM] = _days(date(2025, 1, 1), 21)
    assert never_built(orders, built, date(2025, 1, 31)) == {
        DAILY_CATEGORY_REVENUE: _days(date(2025, 1, 1), 21),
        DAILY_REVENUE: [date(2025, 1, 21)],
        "customer_daily_features": [date(2025, 1, 21)],
    }
    # A day an upstream has not (the dimension's, here) is not expected of the tables built from it; nor is a day
    # outside the partitions, or one not closed yet (a day read through a lag is written once the daily run
    # publishes it).
    built[DIM_PRODUCT] = _days(date(2025, 1, 1), 20)
    built[STG_ORDER_ITEMS] = [*built[STG_ORDER_ITEMS], date(2025, 2, 1)]
    assert never_built(orders, built, date(2025, 1, 31))[DAILY_REVENUE] == [date(2025, 1, 21)]
    assert DAILY_CATEGORY_REVENUE in never_built(orders, built, date(2025, 1, 31))
    assert FACT_ORDER_ITEM not in never_built(orders, built, date(2025, 1, 31))
    assert never_built(orders, built, date(2025, 1, 20))[DAILY_CATEGORY_REVENUE] == _days(date(2025, 1, 1), 20)
    assert DAILY_REVENUE not in never_built(orders, built, date(2025, 1, 20))


def test_a_table_published_and_no_longer_declared_is_named_while_the_lake_holds_it():
    from assets_pkg.pipeline import DAILY_REVENUE
    from assets_pkg.pipeline import pipeline as orders
    from exact_backfills.retirement import Undeclared, no_longer_declared

    published = {t: dict.fromkeys(_days(date(2025, 1, 1), 20)) for t in orders.every_table}
    assert no_longer_declared(orders, published, on_lake=lambda _: True) == []
    published["daily_channel_items"] = dict.fromkeys(_days(date(2025, 1, 1), 7))
    published["an_archived_mart"] = dict.fromkeys(_days(date(2025, 1, 1), 3))
    on_lake = {*orders.every_table, "daily_channel_items"}.__contains__
    assert no_longer_declared(orders, published, on_lake) == [Undeclared("daily_channel_items", 7)]
    assert DAILY_REVENUE in orders.every_table  # a declared table is never among them, on the lake or not
    assert Undeclared("daily_channel_items", 7).describe("exact-backfills") == (
        "daily_channel_items: no longer declared; its 7 published day(s) stay on the lake until "
        "`exact-backfills retire --table daily_channel_items --archive` (moved under _retired, kept readable) or "
        "`--drop`"
    )


def test_a_type_widened_changes_every_day_even_where_spark_hashes_its_values_the_same(spark):
    from decimal import Decimal

    from pyspark.sql import functions as F

    from exact_backfills.declare import Table
    from exact_backfills.plans import TablePlan, day_diff

    table = Table("daily_net", key=["order_date", "channel"], day_column="order_date", upstream={}, build=print)
    days = _days(date(2025, 1, 1), 2)
    narrow = spark.createDataFrame(
        [(d, "web", Decimal("12.50")) for d in days], "order_date date, channel string, net_amount decimal(10,2)"
    )
    wide = narrow.withColumn("net_amount", F.col("net_amount").cast("decimal(12,2)"))
    # Both hash a decimal of up to 18 digits as its unscaled long: by their values alone no day changes.
    by_values = TablePlan("a", "b", [], [])
    day_diff(table, narrow, wide, days, by_values)
    assert by_values.changed_days == []
    reshaped = TablePlan("a", "b", [], [], schema=SchemaDiff.between(narrow.schema, wide.schema))
    day_diff(table, narrow, wide, days, reshaped)
    assert reshaped.changed_days == days and reshaped.changed_columns == {"net_amount": 2}
    assert reshaped.schema.describe() == "retyped net_amount (decimal(10,2) → decimal(12,2))"


def test_a_former_name_is_named_no_longer_declared_once_its_days_in_the_partitions_have_moved(monkeypatch):
    from dataclasses import replace

    from assets_pkg.pipeline import pipeline as orders
    from exact_backfills.renaming import PendingRename, pending_renames
    from exact_backfills.retirement import Undeclared, no_longer_declared

    monkeypatch.setenv("PARTITION_START_DATE", "2025-01-01")
    monkeypatch.setenv("PARTITION_END_DATE", "2025-01-31")
    revenue = replace(orders.by_name["daily_revenue"], name="revenue_by_day", renamed_from="daily_revenue")
    renamed = replace(orders, tables=[revenue if t.name == "daily_revenue" else t for t in orders.tables])
    published = {t: dict.fromkeys(_days(date(2025, 1, 1), 5)) for t in orders.every_table}
    published["daily_revenue"] |= dict.fromkeys([date(2024, 12, 31)])  # a day before the partitions: never moved
    on_lake = {*published, "revenue_by_day"}.__contains__
    assert pending_renames(renamed, published, on_lake) == [
        PendingRename("revenue_by_day", "daily_revenue", _days(date(2025, 1, 1), 5))
    ]
    assert no_longer_declared(renamed, published, on_lake) == []  # its rename names it meanwhile
    published["revenue_by_day"] = dict.fromkeys(_days(date(2025, 1, 1), 5))
    assert pending_renames(renamed, published, on_lake) == []
    assert no_longer_declared(renamed, published, on_lake) == [Undeclared("daily_revenue", 6)]
