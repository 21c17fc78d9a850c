"""The ML pipeline as a team in New York runs it day after day, for its simulated fortnight
(tests/test_ml_stretch.py): its days end at New York's midnight (across the change to daylight-saving time), close at
02:00 once the night's batch of events, status changes and labels is in, and are due by 06:00.

Loaded by the daemon's code server as a user's pipeline is, so it imports nothing of the tests'."""

from dataclasses import replace
from datetime import date, timedelta

from examples.ml_features.pipeline import pipeline as ml_features

assert ml_features.calendar is not None
pipeline = ml_features.with_calendar(
    replace(
        ml_features.calendar,
        first_day=date(2025, 2, 8),
        timezone="America/New_York",
        closes_after=timedelta(hours=2),
        publish_by=timedelta(hours=6),
    )
)
REFERENCE = "tests.pipelines.ml_daily:pipeline"
