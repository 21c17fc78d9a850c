"""A real `dagster dev` (webserver + daemon) for the tests, driven through the same GraphQL calls the UI makes, and
the instance it records in: the bench's own (bench/harness.py), not a copy of it."""

from bench.harness import DagsterDev, instance_at

__all__ = ["DagsterDev", "instance_at"]
