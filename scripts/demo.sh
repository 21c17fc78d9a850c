#!/usr/bin/env bash
# Set up (idempotent), land the demo data, backfill every asset over the whole partition range in runs of up to
# BACKFILL_MAX_PARTITIONS_PER_RUN days recorded in the Dagster instance, then serve the Dagster UI (webserver + daemon)
# on http://127.0.0.1:${DAGSTER_PORT:-3000}.
#
#   bash scripts/demo.sh                     # the embedded default: local Spark, Dagster on SQLite
#   bash scripts/demo.sh --profile cluster   # the production profile: a Spark cluster behind Spark Connect, Dagster
#                                            # on PostgreSQL (scripts/cluster-profile.sh), a lake of its own
set -euo pipefail
case "${1:-} ${2:-}" in
  " ") ;;
  "--profile embedded") ;;
  "--profile cluster") PROFILE=cluster ;;
  *) echo "usage: bash scripts/demo.sh [--profile embedded|cluster]" >&2; exit 2 ;;
esac
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
if [ "${PROFILE:-}" = cluster ]; then
  bash scripts/cluster-profile.sh start
  source .cluster/profile.env
fi
if [ ! -d "${LAKE_ROOT:-$ROOT/.lake}/landing/order_items" ]; then
  python -m assets_pkg generate
fi
python -m assets_pkg backfill
# Served from the instance's folder: next to the repository's dagster.yaml (a template, written into DAGSTER_HOME),
# dagster dev would warn that it is not the one in use. The terminal shows the services' warnings and errors, and
# each run's messages and warnings (python_logs in dagster.yaml), not one line per event; every event is in the UI.
export LAKE_ROOT="$(realpath -m "${LAKE_ROOT:-$ROOT/.lake}")" DAGSTER_HOME="$(realpath "$DAGSTER_HOME")"
cd "$DAGSTER_HOME"
# `dagster dev` still works as documented; its notice that `dg dev` (another package) supersedes it is not a fault.
export PYTHONWARNINGS="ignore:Function \`dev_command\` is superseded"
python -m assets_pkg engine status  # it outlives the UI: `python -m assets_pkg engine stop` when done
exec dagster dev -w "$ROOT/workspace.yaml" -h 127.0.0.1 -p "${DAGSTER_PORT:-3000}" --log-level warning
