#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite: real Spark, real Delta, a real Dagster instance and daemon.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# Two workers, a test module each at a time (a module shares one lake): much of a module's time is spent waiting on
# Dagster's daemon and sensors, which the other worker's module fills. `-n 0` runs everything in this process.
exec python -m pytest -n 2 --dist loadfile --no-loadscope-reorder "$@"
