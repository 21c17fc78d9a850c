#!/usr/bin/env bash
# Set up (idempotent), land the demo data, backfill every asset over the whole partition range in chunked runs
# recorded in the Dagster instance, then serve the Dagster UI (webserver + daemon) on http://127.0.0.1:${DAGSTER_PORT:-3000}.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
if [ ! -d "${LAKE_ROOT:-$ROOT/.lake}/landing/order_items" ]; then
  python -m assets_pkg generate
fi
python -m assets_pkg backfill
exec dagster dev -w workspace.yaml -h 127.0.0.1 -p "${DAGSTER_PORT:-3000}"
