"""What lands for the ML pipeline, under the landing contract."""

from pyspark.sql import types as T

from exact_backfills import Rule, Source, SourceKind

EVENT_TYPES = ("view", "click", "purchase")
AMOUNT = T.DecimalType(12, 2)

APP_EVENTS = Source(
    "app_events",
    schema=T.StructType(
        [
            T.StructField("event_id", T.StringType(), False),
            T.StructField("user_id", T.LongType()),
            T.StructField("event_date", T.DateType(), False),
            T.StructField("event_type", T.StringType()),
            T.StructField("amount", AMOUNT),
            T.StructField("ingested_at", T.TimestampType(), False),
        ]
    ),
    key=["event_id"],
    day="event_date",
    # Delivered with retries: the same event again, the newest ingestion wins.
    newest="ingested_at",
    loaded_at="ingested_at",
    rules=[
        Rule("null_user", "user_id IS NULL"),
        Rule("unknown_event_type", "event_type IS NULL OR event_type NOT IN ('view', 'click', 'purchase')"),
        Rule("negative_amount", "amount < 0"),
    ],
    description="App events, delivered at least once: a retry sends the same event_id again.",
)

USER_STATUS = Source(
    "user_status",
    schema=T.StructType(
        [
            T.StructField("user_id", T.LongType(), False),
            T.StructField("status", T.StringType()),
            T.StructField("changed_at", T.TimestampType(), False),
            T.StructField("ingested_at", T.TimestampType(), False),
        ]
    ),
    key=["user_id"],
    day="changed_at",
    newest="changed_at",
    loaded_at="ingested_at",
    kind=SourceKind.DIMENSION,
    description="A user's status (trial, active, churned), each version valid from the day it changed.",
)

LABELS = Source(
    "labels",
    schema=T.StructType(
        [
            T.StructField("user_id", T.LongType(), False),
            T.StructField("label_date", T.DateType(), False),
            T.StructField("converted", T.BooleanType()),
            T.StructField("labeled_at", T.TimestampType(), False),
            T.StructField("ingested_at", T.TimestampType(), False),
        ]
    ),
    key=["user_id", "label_date"],
    day="label_date",
    newest="labeled_at",
    loaded_at="ingested_at",
    rules=[Rule("null_label", "converted IS NULL")],
    description="Ground truth: whether a user active on a day converted, known weeks later.",
)
