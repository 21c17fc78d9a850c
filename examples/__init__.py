"""Pipelines built on the exact-backfills machinery, beside the orders pipeline (assets_pkg)."""
