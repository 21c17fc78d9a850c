"""The Dagster daemon as `dagster-daemon` runs it, on the project's clock (the simulated one when set):

python -m exact_backfills.daemon run -w WORKSPACE_YAML"""

from exact_backfills.dagster_private import run_daemon

if __name__ == "__main__":
    run_daemon()
