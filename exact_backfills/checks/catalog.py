"""Which checks a table has: the built-in ones its declaration calls for, then the user's."""

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
from exact_backfills.checks.base import Check
from exact_backfills.declare import Declared

BUILT_IN_CHECKS = (
    keys.UNIQUE,
    keys.NOT_NULL,
    reconcile.RECONCILED,
    nothing_lost.LOST,
    content.FINGERPRINTED,
    content.ROW_COUNT,
    up_to_date.FRESH,
    code.CURRENT_CODE,
    late_data.LATE,
    quarantined.HELD_APART,
    deadline.DEADLINE,
)
BUILT_IN = tuple(c.name for c in BUILT_IN_CHECKS)
BLOCKING = tuple(c.name for c in BUILT_IN_CHECKS if c.blocking)


def checks_of(table: Declared, deadline_declared: bool = False) -> list[Check]:
    """Every check of a table, the built-in ones first (the deadline's where its pipeline's calendar declares one)."""
    found = [keys.UNIQUE, keys.NOT_NULL]
    found += [reconcile.RECONCILED] if table.reconcile else []
    found += [nothing_lost.LOST] if nothing_lost.checks_nothing_lost(table) else []
    late = [late_data.LATE] if late_data.publishes_late_rows(table) else []
    return [
        *found,
        content.FINGERPRINTED,
        content.ROW_COUNT,
        up_to_date.FRESH,
        code.CURRENT_CODE,
        *late,
        *([deadline.DEADLINE] if deadline_declared else []),
        *(user.check_of(c) for c in table.checks),
    ]


def names(table: Declared) -> list[str]:
    return [c.name for c in checks_of(table)]
