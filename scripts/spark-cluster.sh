#!/usr/bin/env bash
# A real Spark cluster on this machine, on 127.0.0.1 only: a standalone master, SPARK_WORKERS [1] workers, and a Spark
# Connect server
# whose application runs on that master with the Delta jars and the project's settings. Runs outlive no process of
# the pipeline: every run connects to the same warm application (SPARK_REMOTE=sc://127.0.0.1:$SPARK_CONNECT_PORT, with
# the token of SPARK_CONNECT_TOKEN_FILE).
#
#   bash scripts/spark-cluster.sh start|stop|status
#
# Nothing another user can use: the Connect server runs nothing for a client without the cluster's token; the master,
# the workers and the application authenticate each other with a shared secret (spark.authenticate); the master takes
# no REST submissions and its UI has no kill links; both web UIs ask for the operator's password. Each start makes a
# new token and secret. State in .cluster/ (git-ignored), readable by its user alone: pid and log files, `token`,
# `conf/` (the daemons' settings, the secret among them), `connect.conf` (the application's), `ui-credentials`.
# Ports: SPARK_MASTER_PORT [7077], SPARK_MASTER_WEBUI_PORT [8080], SPARK_WORKER_WEBUI_PORT [8081] (the next ones for
# the next workers), SPARK_CONNECT_PORT [15002]; SPARK_CLUSTER_HOST [127.0.0.1] the address they listen on (another is
# for a real cluster: add TLS and a firewall first, docs/production.md); each worker's SPARK_WORKER_CORES [the
# machine's cores shared among the workers], SPARK_WORKER_MEMORY [8g]; the Connect server's driver
# SPARK_CONNECT_DRIVER_MEMORY [2g], its executor SPARK_EXECUTOR_MEMORY [4g] (Spark's defaults of 1g each are for a
# laptop, not for a backfill's year of TPC-H SF1 line items cached between checks); SPARK_SHORT_RUNS=1 [0] for small
# lakes, as the tests': the application's JVMs compile with the quick compiler only.
set -euo pipefail
umask 077
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source scripts/services.sh
SERVICE=spark-cluster

HOST="${SPARK_CLUSTER_HOST:-127.0.0.1}"
MASTER_PORT="${SPARK_MASTER_PORT:-7077}"
MASTER_UI_PORT="${SPARK_MASTER_WEBUI_PORT:-8080}"
WORKER_UI_PORT="${SPARK_WORKER_WEBUI_PORT:-8081}"
WORKERS="${SPARK_WORKERS:-1}"
[[ "$WORKERS" =~ ^[1-9][0-9]*$ ]] || { echo "spark-cluster: SPARK_WORKERS=$WORKERS is not a positive count" >&2; exit 1; }
WORKER_CORES="${SPARK_WORKER_CORES:-$(( $(nproc) / WORKERS > 0 ? $(nproc) / WORKERS : 1 ))}"
workers() { for i in $(seq "$WORKERS"); do echo "worker-$i"; done; }
# Every worker a pid file names, whatever SPARK_WORKERS was when they started.
started_workers() { for pid in "$STATE"/worker*.pid; do [ -f "$pid" ] && basename "$pid" .pid; done; return 0; }
CONNECT_PORT="${SPARK_CONNECT_PORT:-15002}"
STATE="$ROOT/.cluster"
SPARK_HOME="$(.venv/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
# SPARK_CONF_DIR: the master's and the worker's settings (spark-defaults.conf), which hold the secret, out of `ps`.
export SPARK_HOME SPARK_LOCAL_IP="$HOST" SPARK_LOG_DIR="$STATE/logs" SPARK_WORKER_DIR="$STATE/work" SPARK_CONF_DIR="$STATE/conf"
# Warnings and errors only, in every JVM of the cluster (scripts/spark-log4j2.properties).
LOG4J="-Dlog4j2.configurationFile=file:$ROOT/scripts/spark-log4j2.properties"
export SPARK_DAEMON_JAVA_OPTS="$LOG4J"
JARS_DIR="${DELTA_JARS_DIR:-$ROOT/.jars}"
UI_FILTER=exactbackfills.PasswordFilter
export SPARK_DAEMON_CLASSPATH="$JARS_DIR/exactbackfills-uifilter.jar"

PIDS="$STATE" LOGS="$STATE/logs"
port_taken() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

start() {
  mkdir -p "$STATE/logs" "$STATE/work"
  for name in master $(started_workers) connect; do
    if alive "$name"; then echo "spark-cluster: already running ($name pid $(cat "$STATE/$name.pid")); stop it first" >&2; exit 1; fi
  done
  for port in "$MASTER_PORT" "$MASTER_UI_PORT" $(seq "$WORKER_UI_PORT" $((WORKER_UI_PORT + WORKERS - 1))) "$CONNECT_PORT"; do
    if port_taken "$port"; then echo "spark-cluster: port $HOST:$port is taken by another process; set the SPARK_*_PORT variables" >&2; exit 1; fi
  done
  # Exactly the jars set-up fetched and checked (resources/spark.py application_jars).
  if ! jars="$(.venv/bin/python -c 'from resources.spark import application_jars; print(application_jars())' 2>"$STATE/logs/jars.err")"; then
    echo "spark-cluster: $(tail -1 "$STATE/logs/jars.err" | sed 's/^[A-Za-z.]*: //')" >&2; exit 1
  fi
  [ -f "$SPARK_DAEMON_CLASSPATH" ] || { echo "spark-cluster: $SPARK_DAEMON_CLASSPATH missing: run scripts/setup.sh" >&2; exit 1; }
  chmod 700 "$STATE"
  write_secrets
  # The application's JVMs (its driver and executors) under SPARK_SHORT_RUNS=1 compile with the quick compiler only, as
  # a local driver does (resources/spark.py SHORT_RUN_JAVA_OPTIONS): the tests' small lakes on a few shared cores.
  local app_java="$LOG4J"
  if [ "${SPARK_SHORT_RUNS:-0}" = 1 ]; then
    app_java="$LOG4J $(.venv/bin/python -c 'from resources.spark import SHORT_RUN_JAVA_OPTIONS as o; print(o)')"
  fi

  launch master "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
    --host "$HOST" --port "$MASTER_PORT" --webui-port "$MASTER_UI_PORT"
  wait_until master 60 port_taken "$MASTER_PORT"
  local i=0
  for name in $(workers); do
    launch "$name" "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
      --host "$HOST" --webui-port $((WORKER_UI_PORT + i)) --cores "$WORKER_CORES" --memory "${SPARK_WORKER_MEMORY:-8g}" \
      --work-dir "$STATE/work/$name" "spark://$HOST:$MASTER_PORT"
    wait_until "$name" 60 port_taken $((WORKER_UI_PORT + i))
    i=$((i + 1))
  done
  # The Connect server's application: the Delta jars (shipped to the executors), Delta's SQL extension and catalog,
  # and the project's session settings (UTC dates, Parquet nanosecond timestamps as numbers).
  # A lake on this machine's disk is written by the server's driver and its executors through the project's local
  # file system, as local mode uses (resources/spark.py); a lake on object storage through S3A, with the keys of the
  # environment this script starts in (source .object-store/env first).
  # Its settings in a properties file, not on its command line (the secret is among them; SPARK_CONF's keys may be).
  {
    cat "$STATE/conf/spark-defaults.conf"
    cat <<CONF
spark.executor.memory ${SPARK_EXECUTOR_MEMORY:-4g}
spark.driver.host $HOST
spark.driver.bindAddress $HOST
spark.executor.extraJavaOptions $app_java
spark.connect.grpc.binding.address $HOST
spark.connect.grpc.binding.port $CONNECT_PORT
spark.sql.extensions io.delta.sql.DeltaSparkSessionExtension
spark.sql.catalog.spark_catalog org.apache.spark.sql.delta.catalog.DeltaCatalog
spark.sql.session.timeZone UTC
spark.sql.legacy.parquet.nanosAsLong true
spark.sql.shuffle.partitions 8
spark.databricks.delta.snapshotPartitions 2
spark.ui.enabled false
CONF
    .venv/bin/python -c 'from resources.spark import cluster_application_conf as c; print("".join(f"{k} {v}\n" for k, v in c().items()), end="")'
  } >"$STATE/connect.conf"
  # The token in the server's environment (Spark Connect's SPARK_CONNECT_AUTHENTICATE_TOKEN), which only its user
  # can read, never on its command line.
  SPARK_CONNECT_AUTHENTICATE_TOKEN="$(cat "$STATE/token")" launch connect "$SPARK_HOME/bin/spark-submit" \
    --properties-file "$STATE/connect.conf" \
    --class org.apache.spark.sql.connect.service.SparkConnectServer \
    --master "spark://$HOST:$MASTER_PORT" \
    --name exact-backfills-connect \
    --jars "$jars" \
    --driver-memory "${SPARK_CONNECT_DRIVER_MEMORY:-2g}" \
    --driver-java-options "$app_java" \
    "$(ls "$SPARK_HOME"/jars/spark-connect_*.jar)"
  wait_until connect 120 port_taken "$CONNECT_PORT"
  echo "spark-cluster: master spark://$HOST:$MASTER_PORT (UI http://$HOST:$MASTER_UI_PORT), $WORKERS worker(s), Spark Connect sc://$HOST:$CONNECT_PORT"
  echo "  use it: export SPARK_REMOTE=sc://$HOST:$CONNECT_PORT SPARK_CONNECT_TOKEN_FILE=$STATE/token"
  echo "  its web UIs: user and password in $STATE/ui-credentials"
}

write_secrets() {
  # A new token and secret per start; the UIs' password is kept (the operator has it).
  mkdir -p "$STATE/conf"
  printf '%s\n' "$(new_secret)" >"$STATE/token"
  local secret; secret="$(new_secret)"
  ensure_ui_credentials "$STATE/ui-credentials"
  cat >"$STATE/conf/spark-defaults.conf" <<CONF
spark.authenticate true
spark.authenticate.secret $secret
spark.master.rest.enabled false
spark.ui.killEnabled false
spark.ui.filters $UI_FILTER
spark.$UI_FILTER.param.credentialsFile $STATE/ui-credentials
CONF
}

stop() {
  stop_processes connect $(started_workers) master
  rm -f "$STATE/token" "$STATE/conf/spark-defaults.conf" "$STATE/connect.conf"
  echo "spark-cluster: stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) report_processes master $(started_workers) connect ;;
  *) echo "usage: bash scripts/spark-cluster.sh start|stop|status" >&2; exit 2 ;;
esac
