"""`python -m assets_pkg <command>`: the command line on the orders pipeline, whatever else selects one."""

import sys

from exact_backfills.cli import main

ORDERS = "assets_pkg.pipeline:pipeline"


def run() -> int:
    return main(pipeline=ORDERS, prog="assets-pkg")


if __name__ == "__main__":
    sys.exit(run())
