#!/usr/bin/env bash
# A PostgreSQL server for the Dagster instance of the production profile, behind PgBouncer, on 127.0.0.1 only, with
# its data in .postgres/ (git-ignored; as root, a link to the postgres user's folder, below): Debian's postgresql and
# pgbouncer, installed by this script when run as root and missing.
#
# Why PgBouncer: Dagster's PostgreSQL storage holds no connection open; it connects for every statement, and each
# new PostgreSQL connection forks a server process. PgBouncer keeps the server connections and hands them out, which
# makes a run's event writes several times faster (docs/performance.md).
#
#   bash scripts/postgres.sh start|stop|status|url
#   bash scripts/postgres.sh psql "SQL"      # as the server's superuser, e.g. to create a database
#
# Ports: DAGSTER_PG_PORT [55432] (PgBouncer, the URL's), DAGSTER_PG_SERVER_PORT [55433] (PostgreSQL itself).
# Database and user: dagster, a role that owns its database and nothing else (no superuser, no role or database
# creation), the only one PgBouncer serves. Every connection, through PgBouncer or not, authenticates with
# scram-sha-256: the passwords are made at the first start and kept in libpq's password files, readable by their owner
# alone: .postgres/pgpass the dagster role's, which Dagster reads through PGPASSFILE (`passfile` prints its path), and
# .postgres/superuser.pgpass the server's superuser's, which only this script uses (`psql`); no URL, command line or
# log holds one. `url` prints the connection URL Dagster reads from DAGSTER_POSTGRES_URL (dagster.yaml of the
# profile), without a password.
set -euo pipefail
umask 077
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source scripts/services.sh
SERVICE=postgres
require_packages postgresql pgbouncer

HOST=127.0.0.1
PORT="${DAGSTER_PG_PORT:-55432}"
SERVER_PORT="${DAGSTER_PG_SERVER_PORT:-55433}"
# PostgreSQL refuses to run as root: as root, the server runs as the postgres user, which must reach its data whatever
# the clone's parent folders allow (a clone in a private folder of root's). So its state is a folder of that user's,
# in its home, one per clone, and .postgres in the clone is a link to it.
if [ "$(id -u)" = 0 ]; then
  STATE="$(getent passwd postgres | cut -d: -f6)/exact-backfills/$(printf '%s' "$ROOT" | sha256sum | cut -c1-16)"
else
  STATE="$ROOT/.postgres"
fi
DATA="$STATE/data"
LOG="$STATE/postgres.log"
PASSFILE="$STATE/pgpass"
SUPERUSER_PASSFILE="$STATE/superuser.pgpass"
URL="postgresql+psycopg2://dagster@$HOST:$PORT/dagster"

bin_dir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
BIN="$(bin_dir)"

# As root, the server runs as the postgres user, which owns its state folder. Everything in that folder is then
# written by that user (as_owner), never by root: a link it planted there cannot turn a write of root's into one
# elsewhere.
OWNER="$([ "$(id -u)" = 0 ] && echo postgres || id -un)"
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- sh -c 'umask 077 && exec env PGPASSFILE="$0" "$@"' "$SUPERUSER_PASSFILE" "$@"
  else
    PGPASSFILE="$SUPERUSER_PASSFILE" "$@"
  fi
}
# put FILE: what this script pipes in becomes FILE, readable by its owner alone, replacing it whole.
put() { as_owner sh -c 'umask 077; cat >"$1.new" && mv -f "$1.new" "$1"' put "$1"; }

psql_() { printf '%s\n' "$1" | as_owner "$BIN/psql" -h "$HOST" -p "$SERVER_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -qtA -f -; }
port_taken() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }
server_running() { [ -f "$DATA/postmaster.pid" ] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }
# PgBouncer's pid, if the file names a PgBouncer process of the owner: the file is the owner's to write.
bouncer_pid() {
  local pid
  pid="$(as_owner cat "$STATE/pgbouncer.pid" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = /usr/sbin/pgbouncer ] || return 1
  [ "$(stat -c %U "/proc/$pid" 2>/dev/null)" = "$OWNER" ] || return 1
  echo "$pid"
}
running() { server_running && bouncer_pid >/dev/null; }
# The password of a user in the password files (server port's line).
password_of() {
  as_owner awk -F: -v user="$1" -v port="$SERVER_PORT" '$2 == port && $4 == user { print $5; exit }' \
    "$PASSFILE" "$SUPERUSER_PASSFILE"
}

# The passwords: the dagster role's in Dagster's file, the superuser's in a file of its own, made when missing. A
# password file of an older start held both: the superuser's lines move out of it.
ensure_passwords() {
  if as_owner grep -q '^[^:]*:[^:]*:[^:]*:postgres:' "$PASSFILE" 2>/dev/null; then
    as_owner grep '^[^:]*:[^:]*:[^:]*:postgres:' "$PASSFILE" | grep ":$SERVER_PORT:" | put "$SUPERUSER_PASSFILE"
    as_owner grep -v '^[^:]*:[^:]*:[^:]*:postgres:' "$PASSFILE" | put "$PASSFILE"
  fi
  if ! as_owner test -s "$SUPERUSER_PASSFILE"; then
    NEW_SUPERUSER_PASSWORD=1
    printf '%s\n' "$HOST:$SERVER_PORT:*:postgres:$(new_secret)" | put "$SUPERUSER_PASSFILE"
  fi
  if ! as_owner test -s "$PASSFILE"; then
    local dagster; dagster="$(new_secret)"
    printf '%s\n' "$HOST:$SERVER_PORT:*:dagster:$dagster" "$HOST:$PORT:*:dagster:$dagster" | put "$PASSFILE"
  fi
}

start() {
  if running; then echo "postgres: already running on $HOST:$PORT ($URL)"; return 0; fi
  stop >/dev/null
  if port_taken "$PORT"; then echo "postgres: port $HOST:$PORT is taken by another process; set DAGSTER_PG_PORT" >&2; exit 1; fi
  if port_taken "$SERVER_PORT"; then echo "postgres: port $HOST:$SERVER_PORT is taken by another process; set DAGSTER_PG_SERVER_PORT" >&2; exit 1; fi
  if [ "$(id -u)" = 0 ]; then
    # The folder PostgreSQL used to keep in the clone itself becomes its user's state folder, once.
    if [ -d "$ROOT/.postgres" ] && [ ! -L "$ROOT/.postgres" ]; then
      if [ -f "$ROOT/.postgres/data/postmaster.pid" ]; then
        echo "postgres: a server still runs from $ROOT/.postgres; stop it (kill its postmaster) and start again" >&2; exit 1
      fi
      as_owner test -e "$STATE" && { echo "postgres: both $ROOT/.postgres and $STATE hold a server's state; remove one" >&2; exit 1; }
      as_owner mkdir -p "$(dirname "$STATE")"
      mv -T "$ROOT/.postgres" "$STATE"
      chown -R -h postgres: "$STATE"
    fi
    as_owner mkdir -p "$STATE"
    ln -sfn "$STATE" "$ROOT/.postgres"
  else
    mkdir -p "$STATE"
  fi
  as_owner chmod -R go-rwx "$STATE"
  NEW_SUPERUSER_PASSWORD=0
  ensure_passwords
  if ! as_owner test -f "$DATA/PG_VERSION"; then
    password_of postgres | put "$STATE/initdb-password"
    as_owner sh -c '"$1" -D "$2" -U postgres --auth=scram-sha-256 --pwfile="$3" --encoding=UTF8 --no-locale >"$4" 2>&1' \
      initdb "$BIN/initdb" "$DATA" "$STATE/initdb-password" "$STATE/initdb.log" \
      || { as_owner rm -f "$STATE/initdb-password"; echo "postgres: initdb failed; its log: $STATE/initdb.log" >&2; as_owner tail -20 "$STATE/initdb.log" >&2; exit 1; }
    as_owner rm -f "$STATE/initdb-password"
  elif [ "$NEW_SUPERUSER_PASSWORD" = 1 ]; then
    # A data folder made before the server had passwords: they are set once over its socket (in a folder only its
    # owner enters), then every connection needs one.
    printf '%s\n' "local all all trust" | put "$DATA/pg_hba.conf"
    server_start
    psql_local "ALTER ROLE postgres PASSWORD '$(password_of postgres)'"
    as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
  fi
  printf '%s\n' "local all all scram-sha-256" "host all all $HOST/32 scram-sha-256" | put "$DATA/pg_hba.conf"
  server_start
  # The role's password is set from the password file at each start (the file is what clients use).
  # Its attributes too: whatever an older start or a hand made it, the role may only log in and own what it creates.
  if [ "$(psql_ "SELECT 1 FROM pg_roles WHERE rolname = 'dagster'")" != 1 ]; then psql_ "CREATE ROLE dagster LOGIN"; fi
  psql_ "SET log_statement = 'none'; ALTER ROLE dagster LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD '$(password_of dagster)'"
  [ "$(psql_ "SELECT 1 FROM pg_database WHERE datname = 'dagster'")" = 1 ] || psql_ "CREATE DATABASE dagster OWNER dagster"
  # The server's own databases are not the role's to connect to.
  psql_ "REVOKE CONNECT ON DATABASE postgres, template1 FROM PUBLIC"
  # Session pooling: a client's connection gets a server connection of its own until it disconnects, so every
  # PostgreSQL feature behaves as with a direct connection; only the fork per connection is saved. PgBouncer checks
  # each client's password (scram-sha-256) against its users' file and logs in to the server with it.
  put "$STATE/pgbouncer.ini" <<INI
[databases]
* = host=$HOST port=$SERVER_PORT
[pgbouncer]
listen_addr = $HOST
listen_port = $PORT
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $STATE/pgbouncer-users.txt
pool_mode = session
max_client_conn = 500
default_pool_size = 20
logfile = $STATE/pgbouncer.log
pidfile = $STATE/pgbouncer.pid
INI
  # Its one user: the dagster role; the superuser is refused there.
  printf '"%s" "%s"\n' dagster "$(password_of dagster)" | put "$STATE/pgbouncer-users.txt"
  as_owner /usr/sbin/pgbouncer -d -q "$STATE/pgbouncer.ini" \
    || { echo "postgres: PgBouncer did not start; its log: $STATE/pgbouncer.log" >&2; as_owner tail -20 "$STATE/pgbouncer.log" >&2; exit 1; }
  for _ in $(seq 30); do port_taken "$PORT" && break; sleep 0.2; done
  echo "postgres: running on $HOST:$SERVER_PORT behind PgBouncer on $HOST:$PORT; Dagster's storage: export DAGSTER_POSTGRES_URL=$URL PGPASSFILE=$PASSFILE"
}

# Loopback TCP only; the socket in the state folder (its owner's alone) rather than /var/run/postgresql.
server_start() {
  as_owner "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 \
    -o "-c listen_addresses=$HOST -c port=$SERVER_PORT -c unix_socket_directories=$STATE -c unix_socket_permissions=0700" \
    start >/dev/null || { echo "postgres: did not start; its log: $LOG" >&2; as_owner tail -20 "$LOG" >&2; exit 1; }
}

psql_local() { printf '%s\n' "$1" | as_owner "$BIN/psql" -h "$STATE" -p "$SERVER_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -qtA -f -; }

stop() {
  local pid
  if pid="$(bouncer_pid)"; then
    as_owner kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  as_owner rm -f "$STATE/pgbouncer.pid" 2>/dev/null || true
  if server_running; then as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null; fi
  echo "postgres: stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if running; then echo "postgres: running on $HOST:$PORT ($URL)"; else echo "postgres: stopped"; exit 1; fi ;;
  url) echo "$URL" ;;
  passfile) echo "$PASSFILE" ;;
  psql) psql_ "${2:?an SQL statement}" ;;
  *) echo "usage: bash scripts/postgres.sh start|stop|status|url|passfile|psql SQL" >&2; exit 2 ;;
esac
