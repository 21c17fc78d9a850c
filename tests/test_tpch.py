"""TPC-H through the whole pipeline: daily net revenue equals the TPC-H files' own sums, to the cent, every day."""

from datetime import date

import pytest
from pyspark.sql import functions as F

from assets_pkg.tpch import tpch_dir
from exact_backfills.cli import main
from exact_backfills.partitions import days
from exact_backfills.publish import Change, Operation, RunInfo, publish
from resources.delta_io import read_table
from resources.spark import get_spark
from tests.support.orders import ORDERS, PUBLISH_ORDER

pytestmark = pytest.mark.slow  # builds a lake and runs backfills: minutes, not seconds

SCALE = 0.1
FIRST, LAST = date(1992, 1, 1), date(1998, 8, 2)  # TPC-H's order days: 2,406


@pytest.fixture(scope="module")
def tpch_lake(lake):
    root, _ = lake
    assert main(["import-tpch", "--scale", str(SCALE)]) == 0
    # The whole history published at once, by the same build, checks and commits every run uses (publish.py). Not
    # through a Dagster run: what Dagster records of a run is specified elsewhere, and recording one materialization
    # per table per day for 2,406 days costs minutes (docs/performance.md) and proves nothing about the figures.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PARTITION_START_DATE", FIRST.isoformat())
        env.setenv("PARTITION_END_DATE", LAST.isoformat())
        every_day = Change(Operation.BACKFILL, {t: days(FIRST, LAST) for t in PUBLISH_ORDER})
        publish(get_spark(), ORDERS, every_day, RunInfo("tpch-full-history"))
    return root


def test_full_history_daily_net_revenue_equals_the_tpch_sums_to_the_cent_on_every_day(spark, tpch_lake):
    assert len(days(FIRST, LAST)) == 2406
    src = tpch_dir(SCALE)
    lineitem = spark.read.parquet(str(src / "lineitem.parquet"))
    orders = spark.read.parquet(str(src / "orders.parquet"))
    expected = {
        r.day: r.net
        for r in lineitem.join(orders, lineitem.l_orderkey == orders.o_orderkey)
        .groupBy(F.col("o_orderdate").alias("day"))
        .agg(
            F.sum(
                F.col("l_extendedprice").cast("decimal(18,2)")
                - F.round(F.col("l_extendedprice") * F.col("l_discount"), 2).cast("decimal(18,2)")
            ).alias("net")
        )
        .collect()
    }
    actual = {
        r.order_date: r.net
        for r in read_table(spark, "daily_revenue")
        .groupBy("order_date")
        .agg(F.sum("net_amount").alias("net"))
        .collect()
    }
    assert len(expected) == 2406
    assert actual == expected
