"""The ML pipeline's logic as pure functions of DataFrames: deterministic, so a re-run of an old day gives the same
rows."""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from exact_backfills import valid_to
from examples.ml_features.sources import AMOUNT

WINDOW_DAYS = 7


def user_daily_features(events: DataFrame, statuses: DataFrame, days: list) -> DataFrame:
    """Per user and day D, over the events of D-6..D: events, active days, purchases and their amount, that day's
    events; and the user's status as of D. A user with no event in the window has no row."""
    per_day = events.groupBy("user_id", "event_date").agg(
        F.count(F.lit(1)).alias("events"),
        F.sum(F.when(F.col("event_type") == "purchase", 1).otherwise(0)).alias("purchases"),
        F.sum(F.coalesce("amount", F.lit(0))).alias("amount"),
    )
    # Each day's events count on it and the next WINDOW_DAYS - 1 days.
    windowed = per_day.withColumn(
        "feature_date", F.explode(F.sequence("event_date", F.date_add("event_date", WINDOW_DAYS - 1)))
    ).where(F.col("feature_date").isin(list(days)))
    features = windowed.groupBy("user_id", "feature_date").agg(
        F.sum("events").cast("long").alias("events_7d"),
        F.count(F.lit(1)).cast("long").alias("active_days_7d"),
        F.sum("purchases").cast("long").alias("purchases_7d"),
        F.sum("amount").cast(AMOUNT).alias("amount_7d"),
        F.sum(F.when(F.col("event_date") == F.col("feature_date"), F.col("events")).otherwise(0))
        .cast("long")
        .alias("events_1d"),
    )
    return with_status_as_of(features, statuses)


def with_status_as_of(features: DataFrame, statuses: DataFrame) -> DataFrame:
    """The user's status on the feature's day: the version valid then (none before the user's first)."""
    versions = valid_to(statuses, ["user_id"]).select(
        F.col("user_id").alias("_user"), "valid_from", "valid_to", "status"
    )
    as_of = (
        (features.user_id == versions._user)
        & (features.feature_date >= versions.valid_from)
        & (versions.valid_to.isNull() | (features.feature_date <= versions.valid_to))
    )
    return features.join(versions, as_of, "left").select(
        "user_id", "feature_date", "events_7d", "active_days_7d", "purchases_7d", "amount_7d", "events_1d", "status"
    )


def training_set(features: DataFrame, labels: DataFrame) -> DataFrame:
    """Features with the day's label, joined by user and day: a row for every feature row, labelled once its label
    has landed."""
    label = labels.select("user_id", F.col("label_date").alias("feature_date"), F.col("converted").alias("label"))
    return features.join(label, ["user_id", "feature_date"], "left").select(
        "user_id",
        "feature_date",
        "events_7d",
        "active_days_7d",
        "purchases_7d",
        "amount_7d",
        "events_1d",
        "status",
        "label",
    )
