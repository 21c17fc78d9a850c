#!/usr/bin/env bash
# The production profile on this machine: a Spark cluster behind Spark Connect (scripts/spark-cluster.sh) and the
# Dagster instance on PostgreSQL (scripts/postgres.sh), with a lake and a Dagster home of their own in .cluster/; its
# UI and daemon behind an authenticating proxy (scripts/ui.sh) once `ui.sh start` or the demo starts them.
#
#   bash scripts/cluster-profile.sh start|stop|status
#   source .cluster/profile.env     # after start: what a command needs to run in this profile
#
# `bash scripts/demo.sh --profile cluster` does both and runs the demo in it. profile.env names the files holding
# the secrets (the Connect token, PostgreSQL's passwords), never a secret itself.
#
# Run as root, the UI's services run as a user of their own (scripts/ui.sh), which cannot share files with root's
# commands: the lake is then on the project's object store (scripts/object-store.sh), which both reach with its keys
# (.object-store/env, which profile.env sources), and the cluster starts with them.
set -euo pipefail
umask 077
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
STATE="$ROOT/.cluster"

STORE_ENV="${OBJECT_STORE_HOME:-$ROOT/.object-store}/env"
as_root() { [ "$(id -u)" = 0 ]; }

start() {
  if as_root; then
    bash scripts/object-store.sh status >/dev/null 2>&1 || bash scripts/object-store.sh start
    source "$STORE_ENV"  # the cluster's executors read the lake with these keys
  fi
  bash scripts/spark-cluster.sh status >/dev/null 2>&1 || bash scripts/spark-cluster.sh start
  bash scripts/postgres.sh start
  local lake="export LAKE_ROOT=$STATE/lake"
  if as_root; then lake="source $STORE_ENV"; else mkdir -p "$STATE/lake"; fi
  cat >"$STATE/profile.env" <<ENV
export SPARK_REMOTE=sc://127.0.0.1:${SPARK_CONNECT_PORT:-15002}
export SPARK_CONNECT_TOKEN_FILE=$STATE/token
export DAGSTER_POSTGRES_URL=$(bash scripts/postgres.sh url)
export PGPASSFILE=$(bash scripts/postgres.sh passfile)
export DAGSTER_HOME=$STATE/dagster_home
$lake
ENV
  # The instance's dagster.yaml: the project's, with runs, events and schedules in PostgreSQL.
  (source "$STATE/profile.env" && .venv/bin/python -c 'from exact_backfills.instance import write_config; write_config()')
  echo "cluster-profile: up; its environment: source $STATE/profile.env"
}

case "${1:-}" in
  start) start ;;
  stop)
    bash scripts/ui.sh stop; bash scripts/spark-cluster.sh stop; bash scripts/postgres.sh stop
    if as_root; then bash scripts/object-store.sh stop; fi ;;
  status)
    bash scripts/spark-cluster.sh status && bash scripts/postgres.sh status
    if as_root; then bash scripts/object-store.sh status; fi ;;
  *) echo "usage: bash scripts/cluster-profile.sh start|stop|status" >&2; exit 2 ;;
esac
