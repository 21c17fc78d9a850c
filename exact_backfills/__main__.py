from exact_backfills.cli import command

command()
