"""Partitioned asset checks, evaluated for every day of a run's range at once: grouped by day, never day by day.

Each check is an object (`Check`: name, blocking, severity, description) and its result on a day an `Outcome`
carrying a typed record of what it found; a module per family declares its checks, its record and the constructors
of its outcomes (keys, reconcile, nothing_lost, content, up_to_date, code, late_data, quarantined, user), and
results.py alone makes Dagster's check results of them.

Blocking checks (unique key, keys not null, reconciliation with the upstream table, nothing lost, and the user's
blocking checks) run on the staged result *before* it is committed: a failing day stops the write and the downstream
steps (reconcile before publish). The user's other checks run with them and warn. The fingerprint and the row-count
change are recorded after the commit.
"""

from exact_backfills.checks import (
    code,
    content,
    deadline,
    keys,
    late_data,
    nothing_lost,
    quarantined,
    reconcile,
    up_to_date,
    user,
)
from exact_backfills.checks.base import (
    ERROR,
    SAMPLE_SIZE,
    Check,
    CheckRecord,
    NotEvaluated,
    Outcome,
    Record,
    error_line,
    summary,
)
from exact_backfills.checks.blocking import Upstream, evaluate_blocking
from exact_backfills.checks.catalog import BLOCKING, BUILT_IN, BUILT_IN_CHECKS, checks_of, names
from exact_backfills.checks.code import BUILT_BY_CURRENT_CODE
from exact_backfills.checks.content import (
    FINGERPRINT,
    ROW_COUNT_CHANGE,
    evaluate_after_commit,
    evaluate_published,
    fingerprint_changed,
    row_count_tolerance,
)
from exact_backfills.checks.deadline import PUBLISHED_BY_DEADLINE
from exact_backfills.checks.keys import KEYS_NOT_NULL, UNIQUE_KEY
from exact_backfills.checks.late_data import LATE_DATA, publishes_late_rows
from exact_backfills.checks.nothing_lost import NOTHING_LOST, checks_nothing_lost
from exact_backfills.checks.profile import (
    NO_ROWS,
    DayProfile,
    Verified,
    day_contents,
    day_contents_of,
    day_fingerprints,
    distinct_keys_by_day,
    duplicate_samples,
)
from exact_backfills.checks.quarantined import QUARANTINED, quarantine_outcomes
from exact_backfills.checks.reconcile import RECONCILES
from exact_backfills.checks.results import (
    check_evaluations,
    check_specs,
    events_max_days,
    landing_contract_result,
    latest_materializations,
    quarantine_check_specs,
)
from exact_backfills.checks.up_to_date import UP_TO_DATE

__all__ = [
    "BLOCKING",
    "BUILT_BY_CURRENT_CODE",
    "BUILT_IN",
    "BUILT_IN_CHECKS",
    "ERROR",
    "FINGERPRINT",
    "KEYS_NOT_NULL",
    "PUBLISHED_BY_DEADLINE",
    "LATE_DATA",
    "NOTHING_LOST",
    "NO_ROWS",
    "QUARANTINED",
    "RECONCILES",
    "ROW_COUNT_CHANGE",
    "SAMPLE_SIZE",
    "UNIQUE_KEY",
    "UP_TO_DATE",
    "Check",
    "CheckRecord",
    "DayProfile",
    "NotEvaluated",
    "Outcome",
    "Record",
    "Upstream",
    "Verified",
    "check_evaluations",
    "check_specs",
    "checks_nothing_lost",
    "checks_of",
    "code",
    "content",
    "deadline",
    "day_contents",
    "day_contents_of",
    "day_fingerprints",
    "distinct_keys_by_day",
    "duplicate_samples",
    "error_line",
    "evaluate_after_commit",
    "evaluate_blocking",
    "evaluate_published",
    "events_max_days",
    "fingerprint_changed",
    "keys",
    "landing_contract_result",
    "late_data",
    "latest_materializations",
    "names",
    "nothing_lost",
    "publishes_late_rows",
    "quarantine_check_specs",
    "quarantine_outcomes",
    "quarantined",
    "reconcile",
    "row_count_tolerance",
    "summary",
    "up_to_date",
    "user",
]
