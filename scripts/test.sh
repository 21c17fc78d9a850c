#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite: real Spark, real Delta, a real Dagster instance and daemon.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# Two workers, a test module each at a time (a module shares one lake): much of a module's time is spent waiting on
# Dagster's daemon and sensors, which the other worker's module fills. `-n 0` runs everything in this process.
# Every Spark driver of the tests starts as for a short run (SPARK_SHORT_RUNS): their lakes are small and their
# processes many, so the JVM's optimizing compiler costs the two cores more than it gives back.
export SPARK_SHORT_RUNS="${SPARK_SHORT_RUNS:-1}"
exec python -m pytest -n 2 --dist loadfile --no-loadscope-reorder "$@"
