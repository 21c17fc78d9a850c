"""Every name the project takes from Dagster's private modules, in one place, each with why no public API serves.
tests/test_dagster_private.py fails loudly when Dagster moves or changes any of them: that is the signal to look
for the public API that replaces it.

Most are the string constants Dagster itself reads from run tags and observations; one is a class."""

# A check result recorded for a day of a range run must name the materialization it checked: that pointer is what
# the UI compares to colour a day of the check's Partitions view. Dagster fills it in itself only in a
# single-partition step, and exports no way to fill it in for a range run (see recording.py).
from dagster._core.definitions.asset_checks.asset_check_evaluation import (  # noqa: F401
    AssetCheckEvaluationTargetMaterializationData,
)

# The tag an AssetObservation carries its data version in: an observable asset returns versions, but a restatement op
# records the versions of the landing days its batches change as observations, which take it only as this tag.
from dagster._core.definitions.data_version import DATA_VERSION_TAG  # noqa: F401

# The status of a Dagster backfill, to see whether one is in progress: DagsterInstance.get_backfills takes it, and
# Dagster exports neither it nor a filter that does without it.
from dagster._core.execution.backfill import BulkActionStatus  # noqa: F401

# The run tags by which Dagster gives a run its partition or partition range: a run launched from the command line
# or by a sensor over a range must carry them, and Dagster exports no constant for them.
from dagster._core.storage.tags import (  # noqa: F401
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    PARTITION_NAME_TAG,
)
