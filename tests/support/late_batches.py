"""Landing late and corrected rows on top of a built lake, and asserting which days a restatement rewrote. Landing
a batch, and the corrections of staged items, are the bench's own (bench/harness.py)."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from bench.harness import corrections, land_batch, next_batch_day
from tests.support.lake import files_by_day, versions
from tests.support.orders import DAY_COLUMN, ORDER_TABLES, ORDERS, PUBLISH_ORDER

__all__ = [
    "ORDER_TABLES",
    "assert_rewrote_exactly",
    "check_partition_statuses",
    "corrections",
    "land_batch",
    "latest_check_status",
    "new_items",
    "next_batch_day",
    "snapshot",
    "three_corrected_and_two_late_days",
]


def new_items(day, first_order_id, n):
    return [
        (
            first_order_id + i,
            1,
            day,
            7,
            1,
            "web",
            2,
            Decimal("20.00"),
            Decimal("1.00"),
            Decimal("12.00"),
            datetime.combine(day, datetime.min.time(), tzinfo=UTC) + timedelta(hours=9),
            None,
        )
        for i in range(n)
    ]


def three_corrected_and_two_late_days(spark, start: date) -> tuple[list, set[date]]:
    """The issue's scenario: corrections of 2 items on each of 3 old days, 3 late items on each of 2 other days."""
    corrected_days = [start + timedelta(days=3), start + timedelta(days=7), start + timedelta(days=12)]
    late_days = [start + timedelta(days=20), start + timedelta(days=25)]
    items = [r for d in corrected_days for r in corrections(spark, d, 2)]
    items += [r for i, d in enumerate(late_days) for r in new_items(d, 9_000_000 + 100 * i, 3)]
    return items, set(corrected_days) | set(late_days)


def snapshot(spark, tables=PUBLISH_ORDER, day_column=DAY_COLUMN):
    return {t: (len(versions(spark, t)), files_by_day(spark, t, day_column[t])) for t in tables}


def assert_rewrote_exactly(spark, before, expected_days, tables=ORDER_TABLES, day_column=DAY_COLUMN):
    """One new commit in each of `tables`, rewriting exactly `expected_days` (a set, or a set per table); other
    tables of `before`, and other days' files, untouched."""
    after = snapshot(spark, list(before), day_column)
    for table in before:
        days_of_table = expected_days.get(table, set()) if isinstance(expected_days, dict) else expected_days
        n_before, files_before = before[table]
        n_after, files_after = after[table]
        if table not in tables:
            assert n_after == n_before, f"{table}: a table the change does not affect got a commit"
            continue
        assert n_after == n_before + 1, f"{table}: one commit for the restatement"
        for day in set(files_before) | set(files_after):
            old, new = files_before.get(day, set()), files_after.get(day, set())
            if date.fromisoformat(day) in days_of_table:
                assert not (old & new), f"{table} {day}: should have been rewritten"
            else:
                assert old == new, f"{table} {day}: a day outside the restatement was touched"


def check_partition_statuses(instance, table: str, check: str, pipeline=ORDERS) -> dict[str, str]:
    """Each day's status in the check's Partitions view (SUCCEEDED, FAILED, SKIPPED, ...; a day absent reads as
    missing), computed as the webserver computes it: a result counts only while it targets the day's latest
    materialization. The browser tests check the view itself."""
    from dagster import AssetCheckKey, AssetKey

    from exact_backfills.dagster_private import AssetCheckState, bulk_update_asset_check_state

    key = AssetCheckKey(AssetKey(table), check)
    partitions = pipeline.partitions.definition
    state = bulk_update_asset_check_state(instance, [(key, partitions)], {key: AssetCheckState.empty()})[key]
    return {
        day: status.value
        for status, subset in state.subsets.items()
        for day in subset.subset_value.get_partition_keys()
    }


def latest_check_status(instance, table: str, check: str, day: date) -> str | None:
    """Status of `check` on `day` as the check's Partitions view in the UI shows it (None: missing)."""
    return check_partition_statuses(instance, table, check).get(day.isoformat())
