"""The orders pipeline as it lives day after day (`scripts/demo.sh --live`): each night's batch is loaded at 01:00
UTC, so a day closes at 02:00, once that batch is in, and is due by 06:00.
`EXACT_BACKFILLS_PIPELINE=assets_pkg.live:pipeline` names it."""

from dataclasses import replace
from datetime import timedelta

from assets_pkg.pipeline import pipeline as orders

assert orders.calendar is not None
pipeline = orders.with_calendar(
    replace(orders.calendar, closes_after=timedelta(hours=2), publish_by=timedelta(hours=6))
)
