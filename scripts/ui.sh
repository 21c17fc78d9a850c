#!/usr/bin/env bash
# The production profile's Dagster UI and daemon, behind an authenticating proxy: nginx (Debian's, installed by this
# script when run as root and missing) over TLS with HTTP basic authentication, in front of the webserver on a Unix
# socket in a folder only the services' user enters (exact_backfills/ui_server.py). No port of the webserver exists
# to reach past the proxy, and the proxy refuses what a page of another origin sends (below, in the proxy's settings).
#
#   source .cluster/profile.env && bash scripts/ui.sh start|stop|status
#
# The UI: https://$DAGSTER_UI_HOST:$DAGSTER_UI_PORT [127.0.0.1:3443], user and password in .cluster/ui-credentials
# (made at the first start and shown once). Its certificate is self-signed, made at the first start
# (.cluster/ui/tls.crt): on a shared machine, replace it with one your browsers trust (docs/production.md). Its pages
# alone may call its API: DAGSTER_UI_ORIGIN [https://$DAGSTER_UI_HOST:$DAGSTER_UI_PORT] when browsers reach it at
# another address.
#
# Who runs what. Run by a user, every service runs as that user. Run as root, none does: nginx, the webserver, the
# daemon, the code servers and the runs they launch run as the system user exact-backfills (made at the first start),
# whose folder (/var/lib/exact-backfills/<one per clone>/service, linked from .cluster/ui/service) holds all they
# write: the socket, the proxy's files and access log, the instance's home, their temporary folder, and their own
# copies of the secrets they need (Dagster's PostgreSQL password, the Connect token), never the superuser's. They read
# the project from a copy open to all beside it (its code and packages are no secret; the clone, and root's Python,
# may sit where only root enters), made again at each start: restart the UI to serve changed code. The instance must
# then be in PostgreSQL (DAGSTER_POSTGRES_URL), and the lake on object storage or in a folder that user reaches.
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
# The operator's: the services' pid files and output, the certificate, the password.
STATE="$ROOT/.cluster/ui"
CREDENTIALS="$ROOT/.cluster/ui-credentials"
if [ "$(id -u)" = 0 ]; then
  SHARED="/var/lib/exact-backfills/$(printf '%s' "$ROOT" | sha256sum | cut -c1-16)"
  SERVED="$SHARED/service"
  SWITCH=(setpriv "--reuid=$SERVICE_USER" "--regid=$SERVICE_USER" --init-groups --no-new-privs)
  RUN_AS=("${SWITCH[@]}" --)
  # Binding a port below 1024 is the one privilege the proxy may keep.
  PROXY_AS=("${SWITCH[@]}" --)
  [ "$PORT" -lt 1024 ] && PROXY_AS=("${SWITCH[@]}" --inh-caps=+net_bind_service --ambient-caps=+net_bind_service --)
else
  SERVED="$STATE/service"
  RUN_AS=() PROXY_AS=()
fi
# Written by the services' user alone (as_service): the socket, the proxy's settings, logs and temporary files.
SOCKET="$SERVED/dagster.sock"

PIDS="$STATE" LOGS="$STATE"
port_taken() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

socket_answers() { curl -sf --unix-socket "$SOCKET" -o /dev/null http://localhost/server_info; }

as_service() { "${RUN_AS[@]}" "$@"; }
# put FILE: what this script pipes in becomes FILE, written by the services' user, readable by it alone.
put() { as_service sh -c 'umask 077; cat >"$1.new" && mv -f "$1.new" "$1"' put "$1"; }

# The services' folder: as root, a folder of the services' user in a folder of root's (no one else can plant a link
# where root writes); the operator's own otherwise.
service_folder() {
  if [ "$(id -u)" = 0 ]; then
    ensure_service_user
    install -d -m 755 -o root -g root /var/lib/exact-backfills "$SHARED"
    install -d -m 700 -o "$SERVICE_USER" -g "$SERVICE_USER" "$SERVED"
    ln -sfn "$SERVED" "$STATE/service"
  else
    mkdir -p "$SERVED"
  fi
  as_service mkdir -p "$SERVED/tmp" "$SERVED/nginx-tmp"
  as_service chmod -R go-rwx "$SERVED"
}

write_proxy() {
  if [ ! -s "$STATE/tls.key" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 825 -subj "/CN=localhost" \
      -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$STATE/tls.key" -out "$STATE/tls.crt" 2>/dev/null
  fi
  put "$SERVED/tls.crt" <"$STATE/tls.crt"
  put "$SERVED/tls.key" <"$STATE/tls.key"
  # The password's hash only (APR1, which nginx reads), made from standard input.
  printf '%s:%s\n' "$(cut -d: -f1 "$CREDENTIALS")" "$(cut -d: -f2- "$CREDENTIALS" | openssl passwd -apr1 -stdin)" \
    | put "$SERVED/htpasswd"
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
  put "$SERVED/nginx.conf" <<NGINX
daemon off;
worker_processes 1;
pid $SERVED/nginx.pid;
error_log $SERVED/nginx.log warn;
events { worker_connections 512; }
http {
  # Who asked for what, and the answer: the user's name, never a password (nor a query string or referrer, which may
  # carry one); readable by the services' user alone.
  log_format requests '\$remote_addr \$remote_user [\$time_local] "\$request_method \$uri" \$status \$body_bytes_sent '
                      '\$request_time "\$http_user_agent"';
  access_log $SERVED/access.log requests;
  client_body_temp_path $SERVED/nginx-tmp/body;
  proxy_temp_path $SERVED/nginx-tmp/proxy;
  fastcgi_temp_path $SERVED/nginx-tmp/fastcgi;
  uwsgi_temp_path $SERVED/nginx-tmp/uwsgi;
  scgi_temp_path $SERVED/nginx-tmp/scgi;
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
    ssl_certificate $SERVED/tls.crt;
    ssl_certificate_key $SERVED/tls.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    auth_basic "exact-backfills";
    auth_basic_user_file $SERVED/htpasswd;
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

# The Python the services run, and where it finds the project: as root, the project's packages and a copy of the
# project (service_code) on PYTHONPATH, with the interpreter of the project's version the services' user can run.
PYTHON="$ROOT/.venv/bin/python"
WORKSPACE="$ROOT/workspace.yaml"
SERVICE_ENV=()
service_code() {
  local code="$SHARED/code" site stamp minor candidate
  site="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  minor="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  candidate="$("$PYTHON" -c 'import sys; print(sys._base_executable)')"
  PYTHON=""
  for candidate in "$candidate" "/usr/bin/python$minor"; do
    # Run through a shell of that user's: its lookup of the path is that user's own.
    if [ "$(as_service sh -c 'exec "$0" -c "import sys; print(\"%d.%d\" % sys.version_info[:2])"' "$candidate" 2>/dev/null)" = "$minor" ]; then
      PYTHON="$candidate" && break
    fi
  done
  [ -n "$PYTHON" ] || { echo "ui: no Python $minor that $SERVICE_USER can run (the project's is where only root enters): apt-get install python$minor" >&2; exit 1; }
  install -d -m 755 "$code"
  # The packages: hard links when every file is open to all already, else a copy; made again when they change.
  stamp="$site $(stat -c %Y "$site")"
  if [ "$(cat "$code/packages.from" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$code/packages" "$code/packages.new"
    if [ -n "$(find "$site" ! -perm -o=r -print -quit)" ] || ! cp -al "$site" "$code/packages.new" 2>/dev/null; then
      rm -rf "$code/packages.new" && cp -a "$site" "$code/packages.new" && chmod -R a+rX "$code/packages.new"
    fi
    find "$code/packages.new" -type d -exec chmod 755 {} +  # the copy's own folders
    mv "$code/packages.new" "$code/packages"
    echo "$stamp" >"$code/packages.from"
  fi
  # The project: its files as git lists them (tracked, and new ones not ignored), or every file but hidden ones;
  # compiled here, where the services could not write their compiled modules.
  rm -rf "$code/project.new" && install -d -m 755 "$code/project.new"
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null
  else
    tar --exclude='./.*' -cf - .
  fi | tar -xf - -C "$code/project.new"
  rm -rf "$code/project" && mv "$code/project.new" "$code/project"
  "$PYTHON" -m compileall -q -j 0 "$code/project" >/dev/null || true
  chmod -R a+rX "$code/project"
  WORKSPACE="$code/project/workspace.yaml"
  SERVICE_ENV+=("PYTHONPATH=$code/project:$code/packages" PYTHONNOUSERSITE=1)
}

# As root, the instance's settings and the secrets the services need, in their folder: Dagster's password lines only
# (the URL's user), the Connect token. Both are read at this start: restart the UI after the cluster.
service_instance() {
  : "${DAGSTER_POSTGRES_URL:?not set: as root the services of the UI run as $SERVICE_USER and reach the instance in PostgreSQL (source .cluster/profile.env)}"
  local home="$SERVED/dagster_home" user
  case "${LAKE_ROOT:-}" in
    s3a://* | s3://*) ;;
    *) as_service test -w "${LAKE_ROOT:-$ROOT/.lake}" -a -x "${LAKE_ROOT:-$ROOT/.lake}" || {
         echo "ui: as root the services of the UI run as $SERVICE_USER, which cannot write the lake at ${LAKE_ROOT:-$ROOT/.lake}: put it on object storage (bash scripts/cluster-profile.sh start does, as root)" >&2; exit 1; } ;;
  esac
  as_service mkdir -p "$home"
  put "$home/dagster.yaml" <"$DAGSTER_HOME/dagster.yaml"
  user="$(printf '%s' "$DAGSTER_POSTGRES_URL" | sed -E 's#^[^:]+://([^:@/]+).*#\1#')"
  awk -F: -v user="$user" '$4 == user' "${PGPASSFILE:-/dev/null}" | put "$SERVED/pgpass"
  SERVICE_ENV+=("DAGSTER_HOME=$home" "PGPASSFILE=$SERVED/pgpass" "HOME=$SERVED")
  if [ -n "${SPARK_CONNECT_TOKEN_FILE:-}" ]; then
    put "$SERVED/connect-token" <"$SPARK_CONNECT_TOKEN_FILE"
    SERVICE_ENV+=("SPARK_CONNECT_TOKEN_FILE=$SERVED/connect-token")
  fi
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
  service_folder
  [ "$(id -u)" = 0 ] && service_code && service_instance
  local home
  home="$(env "${SERVICE_ENV[@]}" sh -c 'echo "$DAGSTER_HOME"')"
  # The code servers' sockets go to the temporary folder: theirs alone, not the world's.
  SERVICE_ENV+=("TMPDIR=$SERVED/tmp")
  write_proxy
  # From the instance's folder, as demo.sh serves the embedded UI. The daemon once the webserver answers: both would
  # otherwise create a new instance's tables at once.
  (cd "$home" && launch webserver env "${SERVICE_ENV[@]}" "${RUN_AS[@]}" "$PYTHON" -m exact_backfills.ui_server "$SOCKET" "$WORKSPACE")
  wait_until webserver 180 socket_answers
  (cd "$home" && launch daemon env "${SERVICE_ENV[@]}" "${RUN_AS[@]}" "$PYTHON" -m exact_backfills.daemon run -w "$WORKSPACE" --log-level warning)
  sleep 3
  alive daemon || { echo "ui: the daemon exited; its log: $STATE/daemon.log" >&2; tail -20 "$STATE/daemon.log" >&2; exit 1; }
  launch proxy env "${SERVICE_ENV[@]}" "${PROXY_AS[@]}" /usr/sbin/nginx -p "$SERVED" -e "$SERVED/nginx.log" -c "$SERVED/nginx.conf"
  wait_until proxy 30 port_taken "$PORT"
  echo "ui: https://$HOST:$PORT (user and password in $CREDENTIALS; its certificate: $STATE/tls.crt)"
}

stop() {
  stop_processes proxy webserver daemon
  [ -d "$SERVED" ] && as_service rm -f "$SOCKET"
  echo "ui: stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) report_processes daemon webserver proxy ;;
  *) echo "usage: bash scripts/ui.sh start|stop|status" >&2; exit 2 ;;
esac
