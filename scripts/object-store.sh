#!/usr/bin/env bash
# An S3-compatible server for a lake on object storage: s3proxy (from Maven Central, fetched and checked by
# scripts/setup.sh) on 127.0.0.1, keeping its objects in .object-store/data, readable by its user alone, and asking
# every request for the key pair made at its first start. `start` writes .object-store/env (0600): what a command
# needs to use the lake on it, in the standard names (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
# AWS_REGION, and LAKE_ROOT=s3a://<bucket>/<prefix>).
#
#   bash scripts/object-store.sh start|stop|status
#   source .object-store/env      # then every command, run and service started from this shell uses that lake
#
# Port: OBJECT_STORE_PORT [9000]; bucket: OBJECT_STORE_BUCKET [lake]; prefix: OBJECT_STORE_PREFIX [exact-backfills];
# its folder: OBJECT_STORE_HOME [.object-store]. `stop` stops the server and keeps its data and keys.
set -euo pipefail
umask 077
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source scripts/services.sh
SERVICE=object-store

HOST=127.0.0.1
PORT="${OBJECT_STORE_PORT:-9000}"
BUCKET="${OBJECT_STORE_BUCKET:-lake}"
PREFIX="${OBJECT_STORE_PREFIX:-exact-backfills}"
REGION=us-east-1
STATE="${OBJECT_STORE_HOME:-$ROOT/.object-store}"
JAR="${DELTA_JARS_DIR:-$ROOT/.jars}/s3proxy-4.1.0-jar-with-dependencies.jar"
PIDS="$STATE" LOGS="$STATE"

answers() { curl -s -o /dev/null "http://$HOST:$PORT/"; }
port_taken() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# A signed request to the server, its key pair given to curl on standard input, not its command line.
request() {  # method path
  local access secret
  read -r access secret <"$STATE/keys"
  printf 'user = "%s:%s"\n' "$access" "$secret" | curl -s -K - --aws-sigv4 "aws:amz:$REGION:s3" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -X "$1" -o /dev/null -w '%{http_code}' "http://$HOST:$PORT/$2"
}

start() {
  if alive server; then echo "object-store: already running on http://$HOST:$PORT; use it: source $STATE/env"; return 0; fi
  if port_taken "$PORT"; then echo "object-store: port $HOST:$PORT is taken by another process; set OBJECT_STORE_PORT" >&2; exit 1; fi
  [ -f "$JAR" ] || { echo "object-store: $JAR missing: run scripts/setup.sh" >&2; exit 1; }
  mkdir -p "$STATE/data"
  chmod 700 "$STATE"
  if [ ! -s "$STATE/keys" ]; then
    printf '%s %s\n' "$(new_secret | head -c 20)" "$(new_secret)" >"$STATE/keys.new" && mv -f "$STATE/keys.new" "$STATE/keys"
  fi
  local access secret
  read -r access secret <"$STATE/keys"
  # Its settings, the key pair among them, in a file only its user reads, not on its command line.
  cat >"$STATE/s3proxy.conf" <<CONF
s3proxy.endpoint=http://$HOST:$PORT
s3proxy.authorization=aws-v2-or-v4
s3proxy.identity=$access
s3proxy.credential=$secret
jclouds.provider=filesystem-nio2
jclouds.filesystem.basedir=$STATE/data
CONF
  launch server java -Xmx1g -jar "$JAR" --properties "$STATE/s3proxy.conf"
  wait_until server 60 answers
  local created
  created="$(request PUT "$BUCKET")"
  case "$created" in
    200|409) ;;  # made, or there already
    *) echo "object-store: creating bucket $BUCKET answered HTTP $created; its log: $STATE/server.log" >&2; exit 1 ;;
  esac
  cat >"$STATE/env.new" <<ENV
export AWS_ENDPOINT_URL=http://$HOST:$PORT
export AWS_ACCESS_KEY_ID=$access
export AWS_SECRET_ACCESS_KEY=$secret
export AWS_REGION=$REGION
export LAKE_ROOT=s3a://$BUCKET/$PREFIX
ENV
  mv -f "$STATE/env.new" "$STATE/env"
  echo "object-store: s3proxy on http://$HOST:$PORT, the lake at s3a://$BUCKET/$PREFIX"
  echo "  use it: source $STATE/env"
}

stop() {
  stop_processes server
  echo "object-store: stopped (its data and keys kept in $STATE)"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) report_processes server ;;
  *) echo "usage: bash scripts/object-store.sh start|stop|status" >&2; exit 2 ;;
esac
