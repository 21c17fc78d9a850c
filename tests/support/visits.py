"""A second pipeline beside the orders one, its calendar starting a month before the orders pipeline's: each pipeline's
own days, side by side in one process."""

from datetime import date

from pyspark.sql import types as T

from exact_backfills import Calendar, Pipeline, Source, Staging


def visits_source(name: str) -> Source:
    """A source of site visits, one row per visit, by the day of the visit."""
    columns = [
        T.StructField("visit_id", T.StringType(), False),
        T.StructField("visit_date", T.DateType(), False),
        T.StructField("loaded_at", T.TimestampType(), False),
    ]
    return Source(
        name, T.StructType(columns), key=["visit_id"], day="visit_date", newest="loaded_at", loaded_at="loaded_at"
    )


VISITS = visits_source("visits")

pipeline = Pipeline(
    name="visits",
    sources=[VISITS],
    tables=[Staging("stg_visits", source=VISITS)],
    # Open, and New York's: its last partition is today there, whatever the hour in UTC.
    calendar=Calendar(first_day=date(2024, 12, 1), timezone="America/New_York"),
)
REFERENCE = "tests.support.visits:pipeline"
