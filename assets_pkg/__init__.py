"""The orders pipeline: order items and products landed daily, staged, joined into a fact and aggregated into marts."""
