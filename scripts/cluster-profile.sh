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
set -euo pipefail
umask 077
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
STATE="$ROOT/.cluster"

start() {
  bash scripts/spark-cluster.sh status >/dev/null 2>&1 || bash scripts/spark-cluster.sh start
  bash scripts/postgres.sh start
  mkdir -p "$STATE/lake"
  cat >"$STATE/profile.env" <<ENV
export SPARK_REMOTE=sc://127.0.0.1:${SPARK_CONNECT_PORT:-15002}
export SPARK_CONNECT_TOKEN_FILE=$STATE/token
export DAGSTER_POSTGRES_URL=$(bash scripts/postgres.sh url)
export PGPASSFILE=$(bash scripts/postgres.sh passfile)
export DAGSTER_HOME=$STATE/dagster_home
export LAKE_ROOT=$STATE/lake
ENV
  # The instance's dagster.yaml: the project's, with runs, events and schedules in PostgreSQL.
  (source "$STATE/profile.env" && .venv/bin/python -c 'from exact_backfills.instance import write_config; write_config()')
  echo "cluster-profile: up; its environment: source $STATE/profile.env"
}

case "${1:-}" in
  start) start ;;
  stop) bash scripts/ui.sh stop; bash scripts/spark-cluster.sh stop; bash scripts/postgres.sh stop ;;
  status) bash scripts/spark-cluster.sh status && bash scripts/postgres.sh status ;;
  *) echo "usage: bash scripts/cluster-profile.sh start|stop|status" >&2; exit 2 ;;
esac
