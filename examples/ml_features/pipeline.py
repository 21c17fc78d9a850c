"""The ML pipeline, declared: `EXACT_BACKFILLS_PIPELINE=examples.ml_features.pipeline:pipeline` (or
`--pipeline examples.ml_features.pipeline:pipeline`) selects it."""

from collections.abc import Mapping
from datetime import date
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from exact_backfills import (
    AsOf,
    Calendar,
    DayCheck,
    Demo,
    Pipeline,
    Read,
    Reconcile,
    SameDay,
    Staging,
    Table,
    TrailingDays,
)
from examples.ml_features import transforms
from examples.ml_features.sources import APP_EVENTS, LABELS, USER_STATUS

STG_APP_EVENTS = "stg_app_events"
DIM_USER_STATUS = "dim_user_status"
STG_LABELS = "stg_labels"
USER_DAILY_FEATURES = "user_daily_features"
TRAINING_SET = "training_set"


def build_user_daily_features(spark: SparkSession, days: list[date], read: Read) -> DataFrame:
    return transforms.user_daily_features(read(STG_APP_EVENTS), read(DIM_USER_STATUS), days)


def build_training_set(spark: SparkSession, days: list[date], read: Read) -> DataFrame:
    return transforms.training_set(read(USER_DAILY_FEATURES), read(STG_LABELS))


def labelled_share_within_bounds(figures: Mapping[str, Any]) -> bool:
    """A label lands for every user active on a day: fewer than 9 in 10 of the day's active users labelled says the
    day's labels have not all landed (or some were lost)."""
    return figures["active"] == 0 or figures["labelled"] >= 0.9 * figures["active"]


def _generate(spark: SparkSession, demo: Demo) -> str:
    from examples.ml_features.generate import generate

    return generate(spark, demo.start, demo.end, demo.seed, demo.rows_per_day, demo.bad_rate).describe()


pipeline = Pipeline(
    name="ml_features",
    sources=[APP_EVENTS, USER_STATUS, LABELS],
    calendar=Calendar(first_day=date(2025, 1, 1)),  # open: a partition a day, up to today (UTC)
    tables=[
        Staging(
            STG_APP_EVENTS,
            source=APP_EVENTS,
            description="Each app event once (retries removed, the newest ingestion kept), by its day; events breaking "
            "the contract go to quarantine_app_events with the reason.",
        ),
        Staging(
            DIM_USER_STATUS,
            source=USER_STATUS,
            description="User status versions by the day they take effect: the user as of any day.",
        ),
        Staging(
            STG_LABELS,
            source=LABELS,
            description="Each user's label for a day (converted or not), landed weeks after the day.",
        ),
        # A late event on day D changes the windows of D..D+6; a status change, the later days of that user.
        Table(
            USER_DAILY_FEATURES,
            key=["user_id", "feature_date"],
            day_column="feature_date",
            upstream={STG_APP_EVENTS: TrailingDays(7), DIM_USER_STATUS: AsOf(on=["user_id"])},
            build=build_user_daily_features,
            # The day's own events, counted in the features, are the events staged that day.
            reconcile=Reconcile(STG_APP_EVENTS, {"events": ("sum(events_1d)", "count(1)")}),
            description="Per user and day: events, active days, purchases and amount over the last 7 days, and the "
            "user's status as of the day.",
        ),
        Table(
            TRAINING_SET,
            key=["user_id", "feature_date"],
            day_column="feature_date",
            upstream={USER_DAILY_FEATURES: SameDay(), STG_LABELS: SameDay()},
            build=build_training_set,
            reconcile=Reconcile(USER_DAILY_FEATURES, {"rows": ("count(1)", "count(1)")}),
            checks=[
                DayCheck(
                    "labelled_share",
                    figures={
                        "active": "count_if(events_1d > 0)",
                        "labelled": "count_if(events_1d > 0 AND label IS NOT NULL)",
                    },
                    passes=labelled_share_within_bounds,
                    description="At least 9 in 10 of the users active on the day have their label (a warning): a day "
                    "whose labels have not all landed yet fails it.",
                )
            ],
            description="Features and the day's label, by user and day: what a model trains on.",
        ),
    ],
    generate=_generate,
    description="ML features: app events, user status, 7-day features, late labels and the training set.",
)
