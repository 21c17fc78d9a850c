"""Exact, idempotent backfills for daily-partitioned Spark + Delta pipelines, orchestrated by Dagster: a pipeline
declares its sources and tables (`Pipeline`), the machinery does the rest."""

import warnings

from dagster import BetaWarning, PreviewWarning

from exact_backfills import clock
from exact_backfills.as_of import valid_to
from exact_backfills.calendar import Calendar
from exact_backfills.day_checks import DayCheck, DayOverDay
from exact_backfills.declare import (
    AsOf,
    ColumnAdded,
    ColumnDropped,
    ColumnRetyped,
    Command,
    DayDependency,
    DeclarationError,
    Demo,
    Measure,
    Pipeline,
    Read,
    Reconcile,
    Rule,
    SameDay,
    Source,
    SourceKind,
    Staging,
    Table,
    TrailingDays,
    Window,
)

# Imported when first used: each reads the settings and Dagster's definitions machinery, which a module declaring a
# pipeline does not need at its import.
_LAZY = {"definitions_of": "exact_backfills.location", "land_batch": "exact_backfills.landing"}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'exact_backfills' has no attribute {name!r}")


__all__ = [
    "AsOf",
    "Calendar",
    "ColumnAdded",
    "ColumnDropped",
    "ColumnRetyped",
    "Command",
    "DayCheck",
    "DayDependency",
    "DayOverDay",
    "DeclarationError",
    "Demo",
    "Pipeline",
    "Read",
    "Measure",
    "Reconcile",
    "Rule",
    "SameDay",
    "Source",
    "SourceKind",
    "Staging",
    "Table",
    "TrailingDays",
    "Window",
    "definitions_of",
    "land_batch",
    "valid_to",
]

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

# A Dagster process that loads the project (its code server, each run, the webserver) keeps the project's time: the
# simulated clock's, when one is set (exact_backfills/clock.py).
if clock.simulated() is not None:
    from exact_backfills.dagster_private import follow_the_clock

    follow_the_clock()
