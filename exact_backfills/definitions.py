"""The code location workspace.yaml loads: the pipeline EXACT_BACKFILLS_PIPELINE selects (the orders pipeline when
unset). A workspace with a location per pipeline loads each pipeline's own definitions module instead."""

from exact_backfills.location import definitions_of
from exact_backfills.pipelines import selected

__all__ = ["defs"]

defs = definitions_of(selected())
