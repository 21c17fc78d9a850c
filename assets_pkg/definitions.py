"""The orders pipeline's code location, for a workspace that loads a location per pipeline."""

from assets_pkg.pipeline import pipeline
from exact_backfills.location import definitions_of

defs = definitions_of(pipeline)
