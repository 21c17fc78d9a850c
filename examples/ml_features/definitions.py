"""The ML pipeline's code location, for a workspace that loads a location per pipeline."""

from exact_backfills.location import definitions_of
from examples.ml_features.pipeline import pipeline

defs = definitions_of(pipeline)
