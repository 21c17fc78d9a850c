"""A change of a table's natural key: its rows are unique on other columns. Every day of the table is rewritten in one
commit (a version unique on one key or on the other, never a mix), and the blocking duplicate-key check of the plan
and of the write runs on the new key. The key each commit was unique on is in its userMetadata (`KEY`); a table
written before keys were recorded sees no change of key."""

from collections.abc import Sequence

from pyspark.sql import DataFrame

from resources.delta_io import KEY, KeyChange, written_note
from resources.lake import table_path


def key_change(table: str, key: Sequence[str], version: int | None) -> KeyChange | None:
    """How `key`, the table's declared key, differs from the key its published version `version` was written with;
    None when they are the same columns, the table is not published, or no key was recorded."""
    if version is None or version < 0:
        return None
    return KeyChange.between(written_note(table_path(table), version).get(KEY), key)


def whole_rows_diff(old: DataFrame, new: DataFrame, columns: list[str]) -> tuple[int, int]:
    """Rows added and removed between `old` and `new`, compared whole on `columns` (as a multiset): under a changed
    key no row of one side has a counterpart by key on the other."""
    before, after = old.select(*columns), new.select(*columns)
    return after.exceptAll(before).count(), before.exceptAll(after).count()
