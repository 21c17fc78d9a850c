#!/usr/bin/env bash
# A real Spark cluster on this machine, on 127.0.0.1 only: a standalone master, a worker, and a Spark Connect server
# whose application runs on that master with the Delta jars and the project's settings. Runs outlive no process of
# the pipeline: every run connects to the same warm application (SPARK_REMOTE=sc://127.0.0.1:$SPARK_CONNECT_PORT).
#
#   bash scripts/spark-cluster.sh start|stop|status
#
# Pid and log files in .cluster/ (git-ignored). Ports: SPARK_MASTER_PORT [7077], SPARK_MASTER_WEBUI_PORT [8080],
# SPARK_WORKER_WEBUI_PORT [8081], SPARK_CONNECT_PORT [15002]; SPARK_WORKER_CORES [2], SPARK_WORKER_MEMORY [8g];
# the Connect server's driver SPARK_CONNECT_DRIVER_MEMORY [2g], its executor SPARK_EXECUTOR_MEMORY [4g] (Spark's
# defaults of 1g each are for a laptop, not for a backfill's year of TPC-H SF1 line items cached between checks).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

HOST=127.0.0.1
MASTER_PORT="${SPARK_MASTER_PORT:-7077}"
MASTER_UI_PORT="${SPARK_MASTER_WEBUI_PORT:-8080}"
WORKER_UI_PORT="${SPARK_WORKER_WEBUI_PORT:-8081}"
CONNECT_PORT="${SPARK_CONNECT_PORT:-15002}"
STATE="$ROOT/.cluster"
SPARK_HOME="$(.venv/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
export SPARK_HOME SPARK_LOCAL_IP="$HOST" SPARK_LOG_DIR="$STATE/logs" SPARK_WORKER_DIR="$STATE/work"
# Warnings and errors only, in every JVM of the cluster (scripts/spark-log4j2.properties).
LOG4J="-Dlog4j2.configurationFile=file:$ROOT/scripts/spark-log4j2.properties"
export SPARK_DAEMON_JAVA_OPTS="$LOG4J"
JARS_DIR="${DELTA_JARS_DIR:-$ROOT/.jars}"

port_taken() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }
alive() { [ -f "$STATE/$1.pid" ] && kill -0 "$(cat "$STATE/$1.pid")" 2>/dev/null; }

wait_for_port() {  # name port seconds
  for _ in $(seq "$3"); do
    port_taken "$2" && return 0
    alive "$1" || { echo "spark-cluster: $1 exited; its log: $STATE/logs/$1.log" >&2; tail -20 "$STATE/logs/$1.log" >&2; return 1; }
    sleep 1
  done
  echo "spark-cluster: $1 not listening on $HOST:$2 after $3 s; its log: $STATE/logs/$1.log" >&2
  return 1
}

launch() {  # name command...: in a process group of its own, so that stop takes every child with it
  local name="$1"; shift
  # SIGTERM at its default: a process that ran Dagster in-process may have left it ignored (resources/engine.py).
  setsid env --default-signal=INT,TERM "$@" >"$STATE/logs/$name.log" 2>&1 < /dev/null &
  echo $! >"$STATE/$name.pid"
}

start() {
  mkdir -p "$STATE/logs" "$STATE/work"
  for name in master worker connect; do
    if alive "$name"; then echo "spark-cluster: already running ($name pid $(cat "$STATE/$name.pid")); stop it first" >&2; exit 1; fi
  done
  for port in "$MASTER_PORT" "$MASTER_UI_PORT" "$WORKER_UI_PORT" "$CONNECT_PORT"; do
    if port_taken "$port"; then echo "spark-cluster: port $HOST:$port is taken by another process; set the SPARK_*_PORT variables" >&2; exit 1; fi
  done
  delta_jars="$(ls "$JARS_DIR"/delta-*.jar 2>/dev/null | paste -sd, -)"
  [ -n "$delta_jars" ] || { echo "spark-cluster: no Delta jars in $JARS_DIR: run scripts/setup.sh" >&2; exit 1; }

  launch master "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
    --host "$HOST" --port "$MASTER_PORT" --webui-port "$MASTER_UI_PORT"
  wait_for_port master "$MASTER_PORT" 60
  launch worker "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
    --host "$HOST" --webui-port "$WORKER_UI_PORT" --cores "${SPARK_WORKER_CORES:-2}" --memory "${SPARK_WORKER_MEMORY:-8g}" \
    "spark://$HOST:$MASTER_PORT"
  wait_for_port worker "$WORKER_UI_PORT" 60
  # The Connect server's application: the Delta jars (shipped to the executors), Delta's SQL extension and catalog,
  # and the project's session settings (UTC dates, Parquet nanosecond timestamps as numbers).
  # The lake is on this machine's disk, which the server's driver and its executor write: the project's local file
  # system, as local mode uses (resources/spark.py), when scripts/setup.sh has built it.
  mapfile -t local_fs < <(.venv/bin/python -c \
    'import sys; from resources.spark import local_fs_submit_args; sys.stdout.writelines(a + "\n" for a in local_fs_submit_args())')
  launch connect "$SPARK_HOME/bin/spark-submit" \
    "${local_fs[@]}" \
    --class org.apache.spark.sql.connect.service.SparkConnectServer \
    --master "spark://$HOST:$MASTER_PORT" \
    --name exact-backfills-connect \
    --jars "$delta_jars" \
    --driver-memory "${SPARK_CONNECT_DRIVER_MEMORY:-2g}" \
    --conf spark.executor.memory="${SPARK_EXECUTOR_MEMORY:-4g}" \
    --conf spark.driver.host="$HOST" \
    --driver-java-options "$LOG4J" \
    --conf spark.executor.extraJavaOptions="$LOG4J" \
    --conf spark.driver.bindAddress="$HOST" \
    --conf spark.connect.grpc.binding.address="$HOST" \
    --conf spark.connect.grpc.binding.port="$CONNECT_PORT" \
    --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \
    --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \
    --conf spark.sql.session.timeZone=UTC \
    --conf spark.sql.legacy.parquet.nanosAsLong=true \
    --conf spark.sql.shuffle.partitions=8 \
    --conf spark.databricks.delta.snapshotPartitions=2 \
    --conf spark.ui.enabled=false \
    "$(ls "$SPARK_HOME"/jars/spark-connect_*.jar)"
  wait_for_port connect "$CONNECT_PORT" 120
  echo "spark-cluster: master spark://$HOST:$MASTER_PORT (UI http://$HOST:$MASTER_UI_PORT), one worker, Spark Connect sc://$HOST:$CONNECT_PORT"
  echo "  use it: export SPARK_REMOTE=sc://$HOST:$CONNECT_PORT"
}

stop() {
  for name in connect worker master; do
    if [ -f "$STATE/$name.pid" ]; then
      pid="$(cat "$STATE/$name.pid")"
      kill -TERM -- "-$pid" 2>/dev/null || true
      for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
      kill -KILL -- "-$pid" 2>/dev/null || true
      rm -f "$STATE/$name.pid"
    fi
  done
  echo "spark-cluster: stopped"
}

status() {
  local down=0
  for name in master worker connect; do
    if alive "$name"; then echo "$name: running (pid $(cat "$STATE/$name.pid"))"; else echo "$name: stopped"; down=1; fi
  done
  return $down
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: bash scripts/spark-cluster.sh start|stop|status" >&2; exit 2 ;;
esac
