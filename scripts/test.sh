#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite: real Spark, real Delta, a real Dagster instance and daemon.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# Three workers on CI's two cores, a test module each at a time (a module shares one lake): much of a module's time is
# spent waiting on Dagster's daemon, its sensors and the processes it starts, which the other modules fill. A whole run
# took 41.5 minutes with three against 49 with two on this machine. `-n 0` runs everything in this process.
# Every process of the tests connects to one warm Spark engine of their own (resources/engine.py), stopped when they
# end. The tests that start a driver in their own process (SPARK_ENGINE=in-process) start it as for a short run
# (SPARK_SHORT_RUNS): their lakes are small, so the JVM's optimizing compiler costs two cores more than it gives back.
# For the same reason Spark evaluates their expressions interpreted (SPARK_CODEGEN=0): compiling each query's Java code
# took a large share of the engine's CPU. The bench's test runs the bench with the default, which compiles.
export SPARK_ENGINE_HOME="${SPARK_ENGINE_HOME:-$ROOT/.engine/tests}" SPARK_SHORT_RUNS="${SPARK_SHORT_RUNS:-1}"
export SPARK_CODEGEN="${SPARK_CODEGEN:-0}"
trap 'python -m exact_backfills engine stop >/dev/null' EXIT
python -m pytest -n 3 --dist loadfile --no-loadscope-reorder "$@"
