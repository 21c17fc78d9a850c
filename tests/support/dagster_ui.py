"""The embedded UI (webserver + daemon, as scripts/demo.sh serves it) for the tests, driven through the same GraphQL
calls the UI makes, and the instance it records in: the bench's own (bench/harness.py), not a copy of it."""

from bench.harness import UI_LOG, DagsterDev, instance_at

__all__ = ["UI_LOG", "DagsterDev", "instance_at"]
