#!/usr/bin/env bash
# A PostgreSQL server for the Dagster instance of the production profile, behind PgBouncer, on 127.0.0.1 only, with
# its data in .postgres/ (git-ignored): Debian's postgresql and pgbouncer, installed by this script when run as root
# and missing.
#
# Why PgBouncer: Dagster's PostgreSQL storage holds no connection open; it connects for every statement, and each
# new PostgreSQL connection forks a server process. PgBouncer keeps the server connections and hands them out, which
# makes a run's event writes several times faster (docs/performance.md).
#
#   bash scripts/postgres.sh start|stop|status|url
#   bash scripts/postgres.sh psql "SQL"      # as the server's superuser, e.g. to create a database
#
# Ports: DAGSTER_PG_PORT [55432] (PgBouncer, the URL's), DAGSTER_PG_SERVER_PORT [55433] (PostgreSQL itself).
# Database and user: dagster (loopback connections only, no password).
# `url` prints the connection URL Dagster reads from DAGSTER_POSTGRES_URL (dagster.yaml of the profile).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

HOST=127.0.0.1
PORT="${DAGSTER_PG_PORT:-55432}"
SERVER_PORT="${DAGSTER_PG_SERVER_PORT:-55433}"
STATE="$ROOT/.postgres"
DATA="$STATE/data"
LOG="$STATE/postgres.log"
URL="postgresql+psycopg2://dagster@$HOST:$PORT/dagster"

need() { command -v "$1" >/dev/null 2>&1; }
bin_dir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }

if [ -z "$(bin_dir)" ] || ! [ -x /usr/sbin/pgbouncer ]; then
  if [ "$(id -u)" = 0 ] && need apt-get; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql pgbouncer >/dev/null
  else
    echo "postgres: needs Debian's PostgreSQL and PgBouncer (apt-get install postgresql pgbouncer)" >&2; exit 1
  fi
fi
BIN="$(bin_dir)"

# PostgreSQL refuses to run as root: as root, the server runs as the postgres user, which owns .postgres/.
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

psql_() { as_owner "$BIN/psql" -h "$HOST" -p "$SERVER_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -qtAc "$1"; }
port_taken() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }
server_running() { [ -f "$DATA/postmaster.pid" ] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }
bouncer_running() { [ -f "$STATE/pgbouncer.pid" ] && kill -0 "$(cat "$STATE/pgbouncer.pid")" 2>/dev/null; }
running() { server_running && bouncer_running; }

start() {
  if running; then echo "postgres: already running on $HOST:$PORT ($URL)"; return 0; fi
  stop >/dev/null
  if port_taken "$PORT"; then echo "postgres: port $HOST:$PORT is taken by another process; set DAGSTER_PG_PORT" >&2; exit 1; fi
  if port_taken "$SERVER_PORT"; then echo "postgres: port $HOST:$SERVER_PORT is taken by another process; set DAGSTER_PG_SERVER_PORT" >&2; exit 1; fi
  mkdir -p "$STATE"
  [ "$(id -u)" = 0 ] && chown postgres: "$STATE"
  if [ ! -f "$DATA/PG_VERSION" ]; then
    as_owner "$BIN/initdb" -D "$DATA" -U postgres --auth=trust --encoding=UTF8 --no-locale >"$STATE/initdb.log" 2>&1 \
      || { echo "postgres: initdb failed; its log: $STATE/initdb.log" >&2; tail -20 "$STATE/initdb.log" >&2; exit 1; }
  fi
  # Loopback TCP only; the socket in .postgres/ rather than /var/run/postgresql.
  as_owner "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 \
    -o "-c listen_addresses=$HOST -c port=$SERVER_PORT -c unix_socket_directories=$STATE" start >/dev/null \
    || { echo "postgres: did not start; its log: $LOG" >&2; tail -20 "$LOG" >&2; exit 1; }
  [ "$(psql_ "SELECT 1 FROM pg_roles WHERE rolname = 'dagster'")" = 1 ] || psql_ "CREATE ROLE dagster LOGIN"
  [ "$(psql_ "SELECT 1 FROM pg_database WHERE datname = 'dagster'")" = 1 ] || psql_ "CREATE DATABASE dagster OWNER dagster"
  # Session pooling: a client's connection gets a server connection of its own until it disconnects, so every
  # PostgreSQL feature behaves as with a direct connection; only the fork per connection is saved.
  cat >"$STATE/pgbouncer.ini" <<INI
[databases]
* = host=$HOST port=$SERVER_PORT
[pgbouncer]
listen_addr = $HOST
listen_port = $PORT
unix_socket_dir =
auth_type = trust
auth_file = $STATE/pgbouncer-users.txt
pool_mode = session
max_client_conn = 500
default_pool_size = 20
logfile = $STATE/pgbouncer.log
pidfile = $STATE/pgbouncer.pid
INI
  printf '"dagster" ""\n"postgres" ""\n' >"$STATE/pgbouncer-users.txt"
  [ "$(id -u)" = 0 ] && chown postgres: "$STATE/pgbouncer.ini" "$STATE/pgbouncer-users.txt"
  as_owner /usr/sbin/pgbouncer -d -q "$STATE/pgbouncer.ini" \
    || { echo "postgres: PgBouncer did not start; its log: $STATE/pgbouncer.log" >&2; tail -20 "$STATE/pgbouncer.log" >&2; exit 1; }
  for _ in $(seq 30); do port_taken "$PORT" && break; sleep 0.2; done
  echo "postgres: running on $HOST:$SERVER_PORT behind PgBouncer on $HOST:$PORT; Dagster's storage: export DAGSTER_POSTGRES_URL=$URL"
}

stop() {
  if bouncer_running; then
    pid="$(cat "$STATE/pgbouncer.pid")"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$STATE/pgbouncer.pid"
  if server_running; then as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null; fi
  echo "postgres: stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if running; then echo "postgres: running on $HOST:$PORT ($URL)"; else echo "postgres: stopped"; exit 1; fi ;;
  url) echo "$URL" ;;
  psql) psql_ "${2:?an SQL statement}" ;;
  *) echo "usage: bash scripts/postgres.sh start|stop|status|url|psql SQL" >&2; exit 2 ;;
esac
