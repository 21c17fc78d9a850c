"""Reading a dimension as of a day, for a pipeline's builds: the dimension's staging table holds its versions by the
day each takes effect (`valid_from`); each is valid until the key's next version takes effect."""

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from exact_backfills.declare import VALID_FROM


def valid_to(versions: DataFrame, key: list[str], column: str = "valid_to") -> DataFrame:
    """A dimension's versions with the last day each is valid (`column`, inclusive; null for the current one): the
    day before the key's next version takes effect. Joining on valid_from <= day <= valid_to reads it as of the day."""
    following = F.lead(VALID_FROM).over(Window.partitionBy(*key).orderBy(VALID_FROM))
    return versions.withColumn(column, F.date_sub(following, 1))
