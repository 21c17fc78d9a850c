"""Staging: the rows a change writes. A table reads its upstream tables through an overlay: the write's own rows
where it has them, what is published elsewhere."""

from collections.abc import Callable, Collection, Mapping
from datetime import date

from pyspark.sql import DataFrame

from exact_backfills.builds import ReadDays


def overlay(
    own_days: Mapping[str, Collection[date]],
    own: ReadDays,
    published: ReadDays,
    published_exists: Callable[[str], bool] = lambda _: True,
    across_code_versions: bool = False,
) -> ReadDays:
    """What a table reads of an upstream table: the rows this write has of it (a change's staged rows, a plan's
    shadow) on the days it has them (`own_days`), what is published on the others. Rows of two code versions
    (`across_code_versions`: a plan's) may differ by a column, null where a version has none; else they must not."""

    def read(upstream: str, days: list[date]) -> DataFrame:
        if upstream not in own_days:
            return published(upstream, days)
        ours = set(own_days[upstream])
        mine, rest = sorted(set(days) & ours), sorted(set(days) - ours)
        parts = [own(upstream, mine)] if mine else []
        if rest and published_exists(upstream):
            parts.append(published(upstream, rest))
        if not parts:
            return own(upstream, [])
        if len(parts) == 1:
            return parts[0]
        return parts[0].unionByName(parts[1], allowMissingColumns=across_code_versions)

    return read
