#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: virtualenv with the pinned packages, and the Delta jars from Maven Central
# (Spark's own Ivy resolver cannot reach Maven Central from every network; Maven can).
# Source it: it exports DAGSTER_HOME and puts .venv/bin first on PATH.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

need() { command -v "$1" >/dev/null 2>&1; }
if ! need java || ! need mvn; then
  if [ "$(id -u)" = 0 ] && need apt-get; then
    apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless maven >/dev/null
  else
    echo "setup: needs Java 17 and Maven on PATH" >&2; exit 1
  fi
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=".venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[test]"
  touch "$stamp"
fi

DELTA_VERSION=4.4.0
SPARK_BINARY=4.2
JARS_DIR="${DELTA_JARS_DIR:-$ROOT/.jars}"
if [ ! -f "$JARS_DIR/delta-spark_${SPARK_BINARY}_2.13-${DELTA_VERSION}.jar" ]; then
  for artifact in "io.delta:delta-spark_${SPARK_BINARY}_2.13:${DELTA_VERSION}" "io.delta:delta-storage:${DELTA_VERSION}"; do
    mvn -q -B dependency:copy -Dartifact="$artifact" -DoutputDirectory="$JARS_DIR"
  done
fi

export DAGSTER_HOME="${DAGSTER_HOME:-$ROOT/.dagster_home}"
mkdir -p "$DAGSTER_HOME"
[ -f "$DAGSTER_HOME/dagster.yaml" ] || cp dagster.yaml "$DAGSTER_HOME/dagster.yaml"
export PATH="$ROOT/.venv/bin:$PATH"
