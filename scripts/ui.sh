#!/usr/bin/env bash
# The production profile's Dagster UI and daemon, behind an authenticating proxy: nginx (Debian's, installed by this
# script when run as root and missing) over TLS with HTTP basic authentication, in front of the webserver on a Unix
# socket in .cluster/ui/, a folder only its user enters (exact_backfills/ui_server.py). No port of the webserver
# exists to reach past the proxy.
#
#   source .cluster/profile.env && bash scripts/ui.sh start|stop|status
#
# The UI: https://$DAGSTER_UI_HOST:$DAGSTER_UI_PORT [127.0.0.1:3443], user and password in .cluster/ui-credentials
# (made at the first start and shown once). Its certificate is self-signed, made at the first start
# (.cluster/ui/tls.crt): on a shared machine, replace it with one your browsers trust (docs/production.md).
set -euo pipefail
umask 077
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source scripts/services.sh
SERVICE=ui

HOST="${DAGSTER_UI_HOST:-127.0.0.1}"
PORT="${DAGSTER_UI_PORT:-3443}"
# The origin browsers reach the UI at: the only one whose pages may call its API (and, on loopback, its localhost twin).
ORIGIN="${DAGSTER_UI_ORIGIN:-https://$HOST:$PORT}"
STATE="$ROOT/.cluster/ui"
CREDENTIALS="$ROOT/.cluster/ui-credentials"
SOCKET="$STATE/dagster.sock"
PYTHON="$ROOT/.venv/bin/python"

PIDS="$STATE" LOGS="$STATE"
port_taken() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

socket_answers() { curl -sf --unix-socket "$SOCKET" -o /dev/null http://localhost/server_info; }

write_proxy() {
  mkdir -p "$STATE/nginx-tmp"
  if [ ! -s "$STATE/tls.key" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 825 -subj "/CN=localhost" \
      -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$STATE/tls.key" -out "$STATE/tls.crt" 2>/dev/null
  fi
  # The password's hash only (APR1, which nginx reads), made from standard input.
  printf '%s:%s\n' "$(cut -d: -f1 "$CREDENTIALS")" "$(cut -d: -f2- "$CREDENTIALS" | openssl passwd -apr1 -stdin)" \
    >"$STATE/htpasswd"
  local origins="\"$ORIGIN\" 0;"
  [ "$HOST" = 127.0.0.1 ] && origins="$origins \"https://localhost:$PORT\" 0;"
  local upstream="proxy_pass http://unix:$SOCKET:;
      proxy_http_version 1.1;
      proxy_set_header Upgrade \$http_upgrade;
      proxy_set_header Connection \$connection_upgrade;
      proxy_set_header Host \$host;
      proxy_set_header Authorization \"\";
      proxy_buffering off;
      proxy_read_timeout 1h;"
  cat >"$STATE/nginx.conf" <<NGINX
daemon off;
$([ "$(id -u)" = 0 ] && echo "user root;")
worker_processes 1;
pid $STATE/nginx.pid.own;
error_log $STATE/nginx.log warn;
events { worker_connections 512; }
http {
  access_log off;
  client_body_temp_path $STATE/nginx-tmp/body;
  proxy_temp_path $STATE/nginx-tmp/proxy;
  fastcgi_temp_path $STATE/nginx-tmp/fastcgi;
  uwsgi_temp_path $STATE/nginx-tmp/uwsgi;
  scgi_temp_path $STATE/nginx-tmp/scgi;
  server_tokens off;
  map \$http_upgrade \$connection_upgrade { default upgrade; '' close; }
  # Cross-site requests. The browser attaches the credentials it holds for the UI to a request another page makes
  # (one of the same site: another port of this host), and the webserver runs a mutation given in a GET's query
  # string or a form's, whatever the Origin. So a request a browser says comes from another origin (Origin, or
  # Sec-Fetch-Site, which browsers send on every request over TLS) changes nothing: it may only read a page. The API
  # takes a POST of JSON, which no page of another origin can send without the UI's consent (its CORS preflight is
  # refused too), or the UI's WebSocket. A client that is not a browser sends neither header and needs the password.
  map \$http_origin \$foreign_origin { default 1; "" 0; $origins }
  map \$http_sec_fetch_site \$foreign_site { default 1; "" 0; same-origin 0; }
  map "\$foreign_origin\$foreign_site" \$from_another_origin { default 1; 00 0; }
  map \$request_method \$reads_only { default 0; GET 1; HEAD 1; }
  map "\$reads_only\$from_another_origin" \$cross_site_change { default 0; 01 1; }
  map \$content_type \$json_body { default 0; "~*^application/json\s*(;|\$)" 1; }
  map "\$request_method:\$http_upgrade:\$json_body" \$api_call { default ""; "~^POST::1\$" post; "~*^GET:websocket:0\$" websocket; }
  server {
    listen $HOST:$PORT ssl;
    ssl_certificate $STATE/tls.crt;
    ssl_certificate_key $STATE/tls.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    auth_basic "exact-backfills";
    auth_basic_user_file $STATE/htpasswd;
    client_max_body_size 64m;
    default_type text/plain;
    # No page of another origin frames the UI (to have the operator click in it).
    add_header X-Frame-Options DENY always;
    location = /graphql {
      if (\$from_another_origin) { return 403 "refused: the UI's API answers its own pages ($ORIGIN) only\n"; }
      if (\$api_call = "") { return 403 "refused: the UI's API takes a POST of application/json, or the UI's WebSocket\n"; }
      $upstream
    }
    location / {
      if (\$cross_site_change) { return 403 "refused: a page of another origin changes nothing here\n"; }
      $upstream
    }
  }
}
NGINX
}

start() {
  : "${DAGSTER_HOME:?not set: source .cluster/profile.env first}"
  require_packages nginx
  for name in daemon webserver proxy; do
    if alive "$name"; then echo "ui: already running ($name pid $(cat "$STATE/$name.pid")); stop it first" >&2; exit 1; fi
  done
  if port_taken "$PORT"; then echo "ui: port $HOST:$PORT is taken by another process; set DAGSTER_UI_PORT" >&2; exit 1; fi
  mkdir -p "$STATE"
  chmod 700 "$ROOT/.cluster" "$STATE"
  ensure_ui_credentials "$CREDENTIALS"
  write_proxy
  # From the instance's folder, as demo.sh serves the embedded UI. The daemon once the webserver answers: both would
  # otherwise create a new instance's tables at once.
  (cd "$DAGSTER_HOME" && launch webserver "$PYTHON" -m exact_backfills.ui_server "$SOCKET" "$ROOT/workspace.yaml")
  wait_until webserver 180 socket_answers
  (cd "$DAGSTER_HOME" && launch daemon "$ROOT/.venv/bin/dagster-daemon" run -w "$ROOT/workspace.yaml" --log-level warning)
  sleep 3
  alive daemon || { echo "ui: the daemon exited; its log: $STATE/daemon.log" >&2; tail -20 "$STATE/daemon.log" >&2; exit 1; }
  launch proxy /usr/sbin/nginx -p "$STATE" -e "$STATE/nginx.log" -c "$STATE/nginx.conf"
  wait_until proxy 30 port_taken "$PORT"
  echo "ui: https://$HOST:$PORT (user and password in $CREDENTIALS; its certificate: $STATE/tls.crt)"
}

stop() {
  stop_processes proxy webserver daemon
  rm -f "$SOCKET"
  echo "ui: stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) report_processes daemon webserver proxy ;;
  *) echo "usage: bash scripts/ui.sh start|stop|status" >&2; exit 2 ;;
esac
