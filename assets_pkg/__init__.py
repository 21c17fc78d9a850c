"""Exact, idempotent backfills: daily-partitioned Spark + Delta assets orchestrated by Dagster."""

import warnings

from dagster import BetaWarning, PreviewWarning

# BackfillPolicy and partitioned asset checks are beta/preview in Dagster 1.13; this project relies on them on purpose.
warnings.filterwarnings("ignore", category=BetaWarning)
warnings.filterwarnings("ignore", category=PreviewWarning)
