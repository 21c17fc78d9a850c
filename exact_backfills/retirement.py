"""Tables that come and go: a table the pipeline published and no longer declares stays on the lake, as it was,
until `retire` archives it (moved under the lake's `_retired` folder, readable with every version it had) or drops it
(deleted). Never silently: `stale` names each such table until then. Dagster's record of it (its materializations
and check results) is kept either way: the asset's history stays in the instance."""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from enum import Enum

from exact_backfills import clock
from exact_backfills.declare import Pipeline
from resources import audit, storage
from resources.delta_io import owner_of, table_exists
from resources.lake import retired_path, table_path


class Retirement(Enum):
    ARCHIVE = "archive"  # moved aside, whole, with its log
    DROP = "drop"  # deleted


class RetirementRefused(ValueError):
    """A table `retire` does not touch: still declared, not on the lake, or another pipeline's."""


@dataclass(frozen=True)
class Undeclared:
    """A table the pipeline published and no longer declares: still on the lake, with its published days."""

    table: str
    days: int

    def describe(self, command: str) -> str:
        return (
            f"{self.table}: no longer declared; its {self.days} published day(s) stay on the lake until "
            f"`{command} retire --table {self.table} --archive` (moved under _retired, kept readable) or `--drop`"
        )


def no_longer_declared(
    pipeline: Pipeline, published: audit.BuiltBy, on_lake: Callable[[str], bool] = table_exists
) -> list[Undeclared]:
    """The tables the audit trail says the pipeline published that it no longer declares and the lake still holds."""
    declared = set(pipeline.every_table)
    return [
        Undeclared(table, len(days))
        for table, days in sorted(published.items())
        if table not in declared and not _moving(pipeline, published, table) and on_lake(table)
    ]


def _moving(pipeline: Pipeline, published: audit.BuiltBy, table: str) -> str | None:
    """The table `table` is the former name of, while some of its days are not moved there yet (`stale` names it)."""
    renamed_to = {former: new for new, former in pipeline.renamed.items()}
    if table not in renamed_to:
        return None
    left = set(published.get(table, {})) - set(published.get(renamed_to[table], {}))
    return renamed_to[table] if any(d in pipeline.partitions for d in left) else None  # what `rename` moves


def retire(pipeline: Pipeline, table: str, how: Retirement, published: audit.BuiltBy) -> str:
    """Archive or drop `table`, one the pipeline published (`published`: the audit trail's) and no longer declares;
    what was done, in one line. RetirementRefused, nothing touched, otherwise."""
    if table in pipeline.every_table:
        raise RetirementRefused(
            f"{table} is declared by pipeline {pipeline.name!r}: remove it from the declaration before retiring it"
        )
    path = table_path(table)
    if not table_exists(table):
        raise RetirementRefused(f"{table} is not on the lake ({path}): nothing to retire")
    owner = owner_of(path)
    if table not in published or (owner and owner != pipeline.name):
        raise RetirementRefused(f"{table} was not published by pipeline {pipeline.name!r}: it retires only its own")
    if renamed := _moving(pipeline, published, table):
        raise RetirementRefused(f"{table} is {renamed}'s former name and holds days it has not: `rename` moves them")
    if how is Retirement.DROP:
        storage.delete_tree(path)
        return f"{table} dropped: {path} deleted (its history in Dagster is kept)"
    stamp = clock.now().astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = retired_path(table, stamp)
    storage.move_tree(path, target)
    return f"{table} archived to {target}, every version readable there (its history in Dagster is kept)"
