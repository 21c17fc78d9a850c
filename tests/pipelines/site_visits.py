"""A pipeline that lives in moving time, for the simulated days (tests/test_simulated_days.py): site visits in New
York, whose days end at New York's midnight (across the change to daylight-saving time), published by the daily run
at 00:30 and due by 06:00; each day's visits staged, and a trailing week of them counted per day.

Loaded by the daemon's code server as a user's pipeline is, so it imports nothing of the tests' (tests/support pins
the partitions to a fixed range on import)."""

from datetime import date, timedelta

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from exact_backfills import Calendar, Pipeline, Read, Source, Staging, Table, TrailingDays

# One row per visit, by the day of the visit in New York.
VISITS = Source(
    "site_visits",
    T.StructType(
        [
            T.StructField("visit_id", T.StringType(), False),
            T.StructField("visit_date", T.DateType(), False),
            T.StructField("loaded_at", T.TimestampType(), False),
        ]
    ),
    key=["visit_id"],
    day="visit_date",
    newest="loaded_at",
    loaded_at="loaded_at",
)
STG_VISITS = "stg_site_visits"
WEEKLY_VISITS = "weekly_visits"


def build_weekly_visits(spark: SparkSession, days: list[date], read: Read) -> DataFrame:
    """Per day D, the visits of D-6..D: a late visit changes its day and the six after."""
    wanted = spark.createDataFrame([(d,) for d in days], "visit_day date")
    visits = read(STG_VISITS)
    within = (visits.visit_date <= wanted.visit_day) & (visits.visit_date > F.date_sub(wanted.visit_day, 7))
    return (
        wanted.join(visits, within, "left")
        .groupBy("visit_day")
        .agg(F.count("visit_id").alias("visits_7d"), F.count_distinct("visit_date").alias("days_with_visits"))
    )


pipeline = Pipeline(
    name="site_visits",
    sources=[VISITS],
    tables=[
        Staging(STG_VISITS, source=VISITS),
        Table(
            WEEKLY_VISITS,
            key=["visit_day"],
            day_column="visit_day",
            upstream={STG_VISITS: TrailingDays(7)},
            build=build_weekly_visits,
        ),
    ],
    calendar=Calendar(first_day=date(2025, 3, 5), timezone="America/New_York", publish_by=timedelta(hours=6)),
)
REFERENCE = "tests.pipelines.site_visits:pipeline"
