#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: virtualenv with the pinned packages, the Delta jars from Maven Central
# (Spark's own Ivy resolver cannot reach Maven Central from every network; Maven can), and the project's local file
# system class (resources/java), compiled against the Hadoop that pyspark ships.
# Source it: it exports DAGSTER_HOME and puts .venv/bin first on PATH.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

need() { command -v "$1" >/dev/null 2>&1; }
if ! need java || ! need javac || ! need mvn; then
  if [ "$(id -u)" = 0 ] && need apt-get; then
    apt-get update -qq && apt-get install -y -qq openjdk-17-jdk-headless maven >/dev/null
  else
    echo "setup: needs a Java 17 JDK (java, javac) and Maven on PATH" >&2; exit 1
  fi
fi

# The browser tests drive Debian's Chromium through Playwright (browsers cannot be downloaded by Playwright here).
if ! need chromium; then
  if [ "$(id -u)" = 0 ] && need apt-get; then
    apt-get update -qq && apt-get install -y -qq chromium >/dev/null
  else
    echo "setup: the browser tests need Debian's chromium on PATH (apt-get install chromium)" >&2
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
# Maven prints terminal colour codes even in batch mode: what it says is shown only when it fails, without them.
quietly() { local said; said="$("$@" 2>&1)" || { printf '%s\n' "$said" | sed 's/\x1b\[[0-9;]*m//g' >&2; return 1; }; }
if [ ! -f "$JARS_DIR/delta-spark_${SPARK_BINARY}_2.13-${DELTA_VERSION}.jar" ]; then
  for artifact in "io.delta:delta-spark_${SPARK_BINARY}_2.13:${DELTA_VERSION}" "io.delta:delta-storage:${DELTA_VERSION}"; do
    quietly mvn -q -B dependency:copy -Dartifact="$artifact" -DoutputDirectory="$JARS_DIR"
  done
fi

LOCAL_FS_SRC=resources/java/NioLocalFileSystem.java
LOCAL_FS_JAR="$JARS_DIR/exactbackfills-localfs.jar"
if [ ! -f "$LOCAL_FS_JAR" ] || [ "$LOCAL_FS_SRC" -nt "$LOCAL_FS_JAR" ]; then
  classes="$(mktemp -d)"
  hadoop_api="$(ls .venv/lib/python3*/site-packages/pyspark/jars/hadoop-client-api-*.jar)"
  javac -nowarn --release 17 -cp "$hadoop_api" -d "$classes" "$LOCAL_FS_SRC"
  jar cf "$LOCAL_FS_JAR" -C "$classes" .
  rm -rf "$classes"
fi

export DAGSTER_HOME="${DAGSTER_HOME:-$ROOT/.dagster_home}"
mkdir -p "$DAGSTER_HOME"
# The instance's dagster.yaml: the repository's, plus PostgreSQL storage when DAGSTER_POSTGRES_URL is set.
.venv/bin/python -c 'from exact_backfills.instance import write_config; write_config()' 
export PATH="$ROOT/.venv/bin:$PATH"
