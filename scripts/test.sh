#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite: real Spark, real Delta, a real Dagster instance and daemon.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec python -m pytest "$@"
