#!/usr/bin/env bash
# Set up (idempotent), land the demo data, backfill every asset over the whole partition range in runs of up to
# BACKFILL_MAX_PARTITIONS_PER_RUN days recorded in the Dagster instance, then serve the Dagster UI (webserver + daemon).
# The pipeline is the one EXACT_BACKFILLS_PIPELINE selects (the orders pipeline when unset;
# EXACT_BACKFILLS_PIPELINE=examples.ml_features.pipeline:pipeline for the ML one).
#
#   bash scripts/demo.sh                     # the embedded default: local Spark, Dagster on SQLite, the UI on
#                                            # http://127.0.0.1:${DAGSTER_PORT:-3000}, behind a password it makes
#   bash scripts/demo.sh --profile cluster   # the production profile: a Spark cluster behind Spark Connect, Dagster
#                                            # on PostgreSQL (scripts/cluster-profile.sh), a lake of its own, the UI
#                                            # behind a password over TLS (scripts/ui.sh), in the background
#   bash scripts/demo.sh --live [OPTIONS]    # the orders pipeline day after day on a simulated clock, in front of
#                                            # its UI: a week of history, then each night's batch lands, the day
#                                            # closes and is published; one night the daemon is down and that day is
#                                            # late (a lake of its own in .live; OPTIONS: python -m exact_backfills.live -h)
set -euo pipefail
case "${1:-} ${2:-}" in
  " ") ;;
  "--profile embedded") ;;
  "--profile cluster") PROFILE=cluster ;;
  "--live "*) LIVE=1; shift ;;
  *) echo "usage: bash scripts/demo.sh [--profile embedded|cluster] | --live [OPTIONS]" >&2; exit 2 ;;
esac
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
if [ "${LIVE:-}" = 1 ]; then
  # The orders pipeline with its days closing at 02:00 UTC (once the night's batch is in) and due by 06:00; its
  # calendar's open end, up to the simulated today.
  export EXACT_BACKFILLS_PIPELINE="${EXACT_BACKFILLS_PIPELINE:-assets_pkg.live:pipeline}" PARTITION_END_DATE=""
  exec python -m exact_backfills.live --home "${LIVE_HOME:-$ROOT/.live}" "$@"
fi
# The pipelines' calendars run up to today; the demo's data is 90 days of 2025, and its partitions those days.
export PARTITION_START_DATE="${PARTITION_START_DATE:-2025-01-01}" PARTITION_END_DATE="${PARTITION_END_DATE:-2025-03-31}"
if [ "${PROFILE:-}" = cluster ]; then
  bash scripts/cluster-profile.sh start
  source .cluster/profile.env
fi
python -m exact_backfills generate --if-empty
python -m exact_backfills backfill
if [ "${PROFILE:-}" = cluster ]; then
  bash scripts/ui.sh status >/dev/null 2>&1 || bash scripts/ui.sh start
  echo "demo: stop the profile with: bash scripts/cluster-profile.sh stop"
  exit 0
fi
# Served from the instance's folder: next to the repository's dagster.yaml (a template, written into DAGSTER_HOME),
# Dagster would warn that it is not the one in use. The terminal shows the services' warnings and errors, and each
# run's messages and warnings (python_logs in dagster.yaml), not one line per event; every event is in the UI.
# The webserver is Dagster's, served by the project so that it answers its own pages only (`dagster dev`'s runs
# what any page of another origin sends, and asks no password: exact_backfills/ui_guard.py), with Dagster's daemon
# beside it; Ctrl-C stops both. It prints where its password is (shown once, at its first start).
export LAKE_ROOT="$(realpath -m "${LAKE_ROOT:-$ROOT/.lake}")" DAGSTER_HOME="$(realpath "$DAGSTER_HOME")"
cd "$DAGSTER_HOME"
python -m exact_backfills engine status  # it outlives the UI: `python -m exact_backfills engine stop` when done
exec python -m exact_backfills.ui_server --listen "127.0.0.1:${DAGSTER_PORT:-3000}" "$ROOT/workspace.yaml"
