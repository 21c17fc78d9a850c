#!/usr/bin/env bash
# The peers' Python environment, apart from the project's own (.venv): the project installed in it, plus SQLMesh.
# Idempotent: bench/run.py calls it before the peer step.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="$ROOT/.venv-peers"
SQLMESH_VERSION=0.236.4
if [ -x "$VENV/bin/sqlmesh" ] && [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sqlmesh"))')" = "$SQLMESH_VERSION" ]; then
  exit 0
fi
python3.11 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q -e "$ROOT" "sqlmesh==$SQLMESH_VERSION"
