#!/usr/bin/env bash
# The peers' Python environments, apart from the project's own (.venv): the project installed in each, plus the peer.
#
#   bash bench/peers/setup.sh          # .venv-peers: SQLMesh (bench/run.py calls this before its peer step)
#   bash bench/peers/setup.sh dbt      # .venv-peers-dbt: dbt-core and dbt-spark, for bench/peers/dbt_peer.py
#
# Idempotent. dbt-core stays below 1.11: later releases depend on a parser whose install downloads from GitHub.
# dbt-spark's session extra would pull a newer pyspark than the Delta jars are built for: pinned to the project's.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [ "${1:-}" = dbt ]; then
  VENV="$ROOT/.venv-peers-dbt"
  PACKAGES=("dbt-core==1.10.23" "dbt-spark[session]==1.11.0" "pyspark==4.2.0")
  MARK=dbt
else
  VENV="$ROOT/.venv-peers"
  PACKAGES=("sqlmesh==0.236.4")
  MARK=sqlmesh
fi
if [ -x "$VENV/bin/$MARK" ]; then
  exit 0
fi
python3.11 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q -e "$ROOT" "${PACKAGES[@]}"
