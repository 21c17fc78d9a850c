"""Exact, idempotent backfills: daily-partitioned Spark + Delta assets orchestrated by Dagster."""

import warnings

from dagster import BetaWarning, PreviewWarning

# The beta and preview Dagster APIs the project relies on, each by name: their warnings are silenced one by one, not
# by category, so that any other beta API still warns. tests/test_dagster_private.py checks that each still warns:
# when one no longer does, it became stable and its line goes.
RELIED_ON = {
    BetaWarning: ["observable_source_asset", "DataVersionsByPartition"],
    PreviewWarning: ["partitions_def on an AssetCheckSpec"],
}
for category, names in RELIED_ON.items():
    for name in names:
        warnings.filterwarnings("ignore", message=f".*{name}", category=category)
