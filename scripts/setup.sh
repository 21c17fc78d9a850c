#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: virtualenv with the packages of requirements.lock, each checked against its
# pinned hash; the Delta jars from Maven Central (Spark's own Ivy resolver cannot reach Maven Central from every
# network; Maven can), each checked against its pinned SHA-256; and the project's Java classes (resources/java),
# compiled against the Hadoop and the servlet API that pyspark ships.
# Source it: it exports DAGSTER_HOME, puts .venv/bin first on PATH, and sets umask 077, so that what the project's
# commands write is readable by their user alone (docs/production.md: granting a readers' group).
set -euo pipefail
umask 077
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# What an earlier version wrote in the repository readable by all (the lake, the instance, the services' state): its
# user's alone now, unless FILE_UMASK grants a group (docs/production.md).
if [ "${FILE_UMASK:-077}" = 077 ]; then
  for state in .lake .dagster_home .engine .cluster .artifacts; do
    if [ -d "$state" ]; then find "$state" -perm /077 ! -type l -exec chmod go-rwx {} + 2>/dev/null || true; fi
  done
fi

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

# The virtualenv holds public packages only: readable by all, as /usr/lib is (the security tests run its interpreter as
# another user).
(
  umask 022
  if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
  fi
  stamp=".venv/.installed-$(cat pyproject.toml requirements.lock | sha256sum | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    # Exactly the locked files (pip itself among them), then the project without its dependencies and without build
    # isolation, which would fetch an unpinned setuptools.
    .venv/bin/pip install -q --disable-pip-version-check --require-hashes --no-deps -r requirements.lock
    .venv/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
    if ! .venv/bin/pip check >/dev/null; then
      .venv/bin/pip check >&2; echo "setup: requirements.lock is inconsistent: bash scripts/lock.sh" >&2; exit 1
    fi
    touch "$stamp"
  fi
)
# The project's own modules compiled to bytecode once: where the environment sets PYTHONDONTWRITEBYTECODE, every
# process of a command, a run or a test would compile them again (0.15 s of CPU each for all of them).
.venv/bin/python -m compileall -q -j 0 exact_backfills assets_pkg resources bench >/dev/null

DELTA_VERSION=4.4.0
SPARK_BINARY=4.2
JARS_DIR="${DELTA_JARS_DIR:-$ROOT/.jars}"
# Maven prints terminal colour codes even in batch mode: what it says is shown only when it fails, without them.
quietly() { local said; said="$("$@" 2>&1)" || { printf '%s\n' "$said" | sed 's/\x1b\[[0-9;]*m//g' >&2; return 1; }; }
# The jars Spark loads (resources/spark.py DELTA_JARS), with the SHA-256 Maven Central publishes for each: a jar that
# differs is removed and set-up stops.
DELTA_JARS=(
  "io.delta:delta-spark_${SPARK_BINARY}_2.13:${DELTA_VERSION} delta-spark_${SPARK_BINARY}_2.13-${DELTA_VERSION}.jar 27d4fd8b1f879535c573ed1c718177d6a27f24d3e626ba02e216369725721ead"
  "io.delta:delta-storage:${DELTA_VERSION} delta-storage-${DELTA_VERSION}.jar c46735481fa8e326b0957be02b4420cbcab4b325bb08009b7f2045a95133f1cc"
)
mkdir -p "$JARS_DIR"
for entry in "${DELTA_JARS[@]}"; do
  read -r artifact file sha256 <<<"$entry"
  if [ ! -f "$JARS_DIR/$file" ]; then
    quietly mvn -q -B org.apache.maven.plugins:maven-dependency-plugin:2.8:copy -Dartifact="$artifact" -DoutputDirectory="$JARS_DIR"
  fi
  if ! echo "$sha256  $JARS_DIR/$file" | sha256sum --quiet -c - >/dev/null 2>&1; then
    rm -f "$JARS_DIR/$file"
    echo "setup: $file does not have its pinned SHA-256 $sha256: removed; not loading it" >&2; exit 1
  fi
done

# Object storage (LAKE_ROOT=s3a://...): Hadoop's S3A with the AWS SDK modules it uses (resources/java/s3a-jars.pom.xml)
# in .jars/s3a, less what Spark already has; and s3proxy, the S3 server of scripts/object-store.sh. Each jar is checked
# against its pinned SHA-256 (resources/java/s3a-jars.sha256).
S3A_DIR="$JARS_DIR/s3a"
s3a_jars_pinned() { (cd "$S3A_DIR" 2>/dev/null && sha256sum --quiet -c "$ROOT/resources/java/s3a-jars.sha256" >/dev/null 2>&1); }
if ! s3a_jars_pinned; then
  quietly mvn -q -B -f resources/java/s3a-jars.pom.xml org.apache.maven.plugins:maven-dependency-plugin:2.8:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$S3A_DIR" \
    -DexcludeGroupIds=io.netty,org.slf4j,commons-codec,commons-logging,org.apache.httpcomponents
  if ! s3a_jars_pinned; then
    rm -rf "$S3A_DIR"
    echo "setup: the S3A jars Maven gave do not have their SHA-256 in resources/java/s3a-jars.sha256: removed" >&2; exit 1
  fi
fi
S3PROXY_JAR=s3proxy-4.1.0-jar-with-dependencies.jar
S3PROXY_SHA256=a4d025969aaf796616ed4b1e2491d87d455ce84bb28cb9db086b2e6aaa68b48d
if [ ! -f "$JARS_DIR/$S3PROXY_JAR" ]; then
  quietly mvn -q -B org.apache.maven.plugins:maven-dependency-plugin:2.8:copy \
    -Dartifact=org.gaul:s3proxy:4.1.0:jar:jar-with-dependencies -DoutputDirectory="$JARS_DIR"
fi
if ! echo "$S3PROXY_SHA256  $JARS_DIR/$S3PROXY_JAR" | sha256sum --quiet -c - >/dev/null 2>&1; then
  rm -f "$JARS_DIR/$S3PROXY_JAR"
  echo "setup: $S3PROXY_JAR does not have its pinned SHA-256 $S3PROXY_SHA256: removed" >&2; exit 1
fi

# The project's classes: the local file system (resources/spark.py), the password filter of the cluster's web UIs
# (scripts/spark-cluster.sh) and Delta's log stores for object storage and for a local lake (resources/spark.py), each
# against the APIs pyspark and those jars ship.
build_jar() {  # jar "sources" classpath-globs...
  local jar="$JARS_DIR/$1" sources="$2" classes classpath source stale=
  shift 2
  for source in $sources; do [ "$source" -nt "$jar" ] && stale=1; done
  if [ ! -f "$jar" ] || [ -n "$stale" ]; then
    classes="$(mktemp -d)"
    classpath="$(ls "$@" | paste -sd:)"
    # shellcheck disable=SC2086  # the sources, one word each
    javac -nowarn --release 17 -cp "$classpath" -d "$classes" $sources
    jar cf "$jar" -C "$classes" .
    rm -rf "$classes"
  fi
}
PYSPARK_JARS="$(ls -d .venv/lib/python3*/site-packages/pyspark/jars)"
build_jar exactbackfills-localfs.jar resources/java/NioLocalFileSystem.java "$PYSPARK_JARS"/hadoop-client-api-*.jar
build_jar exactbackfills-uifilter.jar resources/java/PasswordFilter.java "$PYSPARK_JARS"/jakarta.servlet-api-*.jar
build_jar exactbackfills-logstore.jar "resources/java/ConditionalPutLogStore.java resources/java/HardLinkLogStore.java" \
  "$PYSPARK_JARS"/hadoop-client-api-*.jar \
  "$JARS_DIR/delta-storage-${DELTA_VERSION}.jar" "$S3A_DIR"/hadoop-aws-*.jar

export DAGSTER_HOME="${DAGSTER_HOME:-$ROOT/.dagster_home}"
mkdir -p "$DAGSTER_HOME"
# The instance's dagster.yaml: the repository's, plus PostgreSQL storage when DAGSTER_POSTGRES_URL is set.
.venv/bin/python -c 'from exact_backfills.instance import write_config; write_config()' 
export PATH="$ROOT/.venv/bin:$PATH"
