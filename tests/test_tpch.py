"""TPC-H through the whole pipeline: daily net revenue equals the TPC-H files' own sums, to the cent, every day."""

import os
import subprocess
import sys

import pytest
from pyspark.sql import functions as F

from assets_pkg.cli import main
from assets_pkg.tpch import tpch_dir
from resources.delta_io import read_table
from resources.lake import REPO_ROOT

pytestmark = pytest.mark.slow  # builds a lake and runs backfills: minutes, not seconds

SCALE = 0.1


@pytest.fixture(scope="module")
def tpch_lake(lake):
    root, _ = lake
    # The landing does not depend on the partitions: imported in this process, on its warm Spark session. The
    # backfill needs TPC-H's 2,406 days as its partitions, which are fixed when assets_pkg is imported: a process of
    # its own, as users run it.
    assert main(["import-tpch", "--scale", str(SCALE)]) == 0
    env = {
        **os.environ,
        "LAKE_ROOT": str(root),
        "DAGSTER_HOME": str(root / "dagster_home"),
        "PARTITION_START_DATE": "1992-01-01",
        "PARTITION_END_DATE": "1998-08-02",
        "BACKFILL_MAX_PARTITIONS_PER_RUN": "2406",
    }
    done = subprocess.run([sys.executable, "-m", "assets_pkg", "backfill"], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return root


def test_full_history_daily_net_revenue_equals_the_tpch_sums_to_the_cent_on_every_day(spark, tpch_lake):
    src = tpch_dir(SCALE)
    lineitem = spark.read.parquet(str(src / "lineitem.parquet"))
    orders = spark.read.parquet(str(src / "orders.parquet"))
    expected = {
        r.day: r.net
        for r in lineitem.join(orders, lineitem.l_orderkey == orders.o_orderkey)
        .groupBy(F.col("o_orderdate").alias("day"))
        .agg(F.sum(F.col("l_extendedprice").cast("decimal(18,2)") - F.round(F.col("l_extendedprice") * F.col("l_discount"), 2).cast("decimal(18,2)")).alias("net"))
        .collect()
    }
    actual = {
        r.order_date: r.net
        for r in read_table(spark, "daily_revenue").groupBy("order_date").agg(F.sum("net_amount").alias("net")).collect()
    }
    assert len(expected) == 2406
    assert actual == expected
