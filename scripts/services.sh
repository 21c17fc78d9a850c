# Sourced by the scripts that start the project's services (spark-cluster.sh, postgres.sh, ui.sh): the Debian packages
# they need, their processes, and the secrets they make. A script sets SERVICE (its name in messages), and for its
# processes PIDS (the folder of their pid files) and LOGS (of their logs), before calling these.

need() { command -v "$1" >/dev/null 2>&1; }

# The Debian packages, installed with apt when one is missing and this runs as root; else a one-line refusal.
require_packages() {  # package...
  local missing=()
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
  done
  [ "${#missing[@]}" = 0 ] && return 0
  if [ "$(id -u)" = 0 ] && need apt-get; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "$SERVICE: needs Debian's ${missing[*]} (apt-get install ${missing[*]})" >&2; exit 1
  fi
}

alive() { [ -f "$PIDS/$1.pid" ] && kill -0 "$(cat "$PIDS/$1.pid")" 2>/dev/null; }

launch() {  # name command...: in a process group of its own, so that stop takes every child with it
  local name="$1"; shift
  # SIGTERM at its default: a process that ran Dagster in-process may have left it ignored (resources/engine.py).
  setsid env --default-signal=INT,TERM "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$PIDS/$name.pid"
}

wait_until() {  # name seconds command...: until the command succeeds, while the named process lives
  local name="$1" seconds="$2"; shift 2
  for _ in $(seq $((seconds * 5))); do
    "$@" && return 0
    alive "$name" || { echo "$SERVICE: $name exited; its log: $LOGS/$name.log" >&2; tail -20 "$LOGS/$name.log" >&2; return 1; }
    sleep 0.2
  done
  echo "$SERVICE: $name not ready after $seconds s; its log: $LOGS/$name.log" >&2
  return 1
}

stop_processes() {  # name...: each process group, in that order, by SIGTERM then after 30 s SIGKILL
  local pid
  for name in "$@"; do
    if [ -f "$PIDS/$name.pid" ]; then
      pid="$(cat "$PIDS/$name.pid")"
      kill -TERM -- "-$pid" 2>/dev/null || true
      for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -KILL -- "-$pid" 2>/dev/null || true
      rm -f "$PIDS/$name.pid"
    fi
  done
}

report_processes() {  # name...: a line each; fails if one is not running
  local down=0
  for name in "$@"; do
    if alive "$name"; then echo "$name: running (pid $(cat "$PIDS/$name.pid"))"; else echo "$name: stopped"; down=1; fi
  done
  return $down
}

# As root, the services that need no privilege run as this system user (scripts/ui.sh), made when missing.
SERVICE_USER=exact-backfills
ensure_service_user() {
  id -u "$SERVICE_USER" >/dev/null 2>&1 && return 0
  useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$SERVICE_USER"
}

# Secrets are written readable by their user alone (the scripts' umask 077) and never passed on a command line
# (bash's printf and echo are builtins).

# A random secret: 32 characters of [A-Za-z0-9].
new_secret() { head -c 48 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 32; }

# The operator's user and password for the profile's web UIs (the Dagster UI behind its proxy, the Spark master's and
# worker's), as "user:password" in FILE: made at the first start, and shown that once on a terminal.
ensure_ui_credentials() {  # FILE
  if [ ! -s "$1" ]; then
    printf 'operator:%s\n' "$(new_secret)" >"$1.new" && mv -f "$1.new" "$1"
    # Shown on a terminal only: an output sent elsewhere is a log, and a log holds no secret.
    if [ -t 1 ]; then
      echo "The production profile's web UIs: user operator, password $(cut -d: -f2- "$1")"
    else
      echo "The production profile's web UIs: user operator, a new password (not shown: no terminal)"
    fi
    echo "  (kept in $1, readable by you alone)"
  fi
}
