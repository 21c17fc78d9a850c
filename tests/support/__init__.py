"""Every helper the tests share: the lake's content by column name (lake), late batches and what a restatement
rewrote (late_batches), a real `dagster dev` (dagster_ui) seen in Chromium (browser), the pool's slot claims
(slot_claims).

Importing this package (any helper does) pins the tests' partitions: PARTITION_START_DATE and PARTITION_END_DATE stand
in for every pipeline's own calendar, so a developer's environment cannot change them."""

import os

# The tests' partitions, pinned so a developer's environment cannot change them.
os.environ.update(
    {"PARTITION_START_DATE": "2025-01-01", "PARTITION_END_DATE": "2025-03-31", "BACKFILL_MAX_PARTITIONS_PER_RUN": "31"}
)
