"""`python -m assets_pkg <command>`: the command line on the orders pipeline, whatever else selects one."""

from exact_backfills.cli import main
from exact_backfills.cli.ending import end

ORDERS = "assets_pkg.pipeline:pipeline"


def run() -> int:
    return main(pipeline=ORDERS, prog="assets-pkg")


def command() -> None:
    """The installed `assets-pkg`."""
    end(run())


if __name__ == "__main__":
    command()
