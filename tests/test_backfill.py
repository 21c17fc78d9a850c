"""A range backfill replaces exactly its range; re-running it changes nothing."""

import stat
from collections import defaultdict
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from assets_pkg.generate import generate
from exact_backfills import landing
from exact_backfills.backfill import BackfillRequest, run_backfill, runs_url, selected_keys
from resources.delta_io import read_table
from resources.lake import control_path, table_path
from resources.spark import LOCAL_FS_CLASS, LOCAL_FS_CONTEXT_CLASS
from tests.support.lake import TABLE_KEYS, duplicate_keys, files_by_day, rows, versions
from tests.support.orders import DAY_COLUMN, ORDER_ITEMS, ORDERS

pytestmark = pytest.mark.slow  # builds a lake and runs backfills: minutes, not seconds

START, END = date(2025, 1, 1), date(2025, 1, 30)
TABLES = list(TABLE_KEYS)


@pytest.fixture(scope="module")
def built(spark, lake):
    _, instance = lake
    summary = generate(spark, START, END, seed=11, rows_per_day=60)
    assert summary.duplicates and summary.corrections and summary.moved_days and summary.late_rows
    assert run_backfill(BackfillRequest(ORDERS, START, END), instance=instance, echo=lambda _: None)
    return instance


def latest_versions_in_python(spark):
    """Oracle written without the pipeline's code: the latest landed version of each key, by updated_at then
    ingested_at (the generator's duplicate deliveries are identical rows, so no further tie-break matters)."""
    latest = {}
    for r in landing.read_landing(spark, ORDER_ITEMS).collect():
        key = (r.order_id, r.order_item_id)
        if key not in latest or (r.updated_at, r.ingested_at) > (latest[key].updated_at, latest[key].ingested_at):
            latest[key] = r
    return latest


def test_every_table_holds_exactly_one_row_per_natural_key(spark, built):
    for table in TABLES:
        assert read_table(spark, table).count() > 0, table
        assert duplicate_keys(spark, table) == 0, table


def test_staging_holds_the_latest_version_of_every_landed_key_on_its_current_day(spark, built):
    expected = {
        key: (r.order_date, r.quantity, r.gross_amount)
        for key, r in latest_versions_in_python(spark).items()
        if START <= r.order_date <= END
    }
    actual = {
        (r.order_id, r.order_item_id): (r.order_date, r.quantity, r.gross_amount)
        for r in read_table(spark, "stg_order_items").collect()
    }
    assert actual == expected


def test_daily_net_revenue_reconciles_to_the_cent_with_the_landing_data(spark, built):
    expected = defaultdict(Decimal)
    for r in latest_versions_in_python(spark).values():
        if START <= r.order_date <= END:
            expected[r.order_date] += r.gross_amount - r.discount_amount
    actual = defaultdict(Decimal)
    for r in read_table(spark, "daily_revenue").collect():
        actual[r.order_date] += r.net_amount
    assert dict(actual) == dict(expected)
    assert len(actual) == (END - START).days + 1


def test_rerunning_a_subrange_changes_nothing_and_touches_only_its_days(spark, built):
    before = {t: rows(spark, t) for t in TABLES}
    files_before = {t: files_by_day(spark, t, DAY_COLUMN[t]) for t in TABLES}
    commits_before = {t: len(versions(spark, t)) for t in TABLES}

    a, b = date(2025, 1, 8), date(2025, 1, 17)
    assert run_backfill(BackfillRequest(ORDERS, a, b, chunk_size=5), instance=built, echo=lambda _: None)

    for table in TABLES:
        assert rows(spark, table) == before[table], f"{table}: content changed"
        # One Delta commit per table per chunk: two chunks of five days.
        assert len(versions(spark, table)) == commits_before[table] + 2, table
        after = files_by_day(spark, table, DAY_COLUMN[table])
        for day in set(after) | set(files_before[table]):
            inside = a <= date.fromisoformat(day) <= b
            old, new = files_before[table].get(day, set()), after.get(day, set())
            if inside:
                assert not old & new, f"{table} {day}: a day in the range was not rewritten"
            else:
                assert old == new, f"{table} {day}: a day outside the range was touched"


def test_day_folders_data_and_commit_files_are_readable_by_their_user_alone_through_the_projects_local_file_system(
    spark, built
):
    # The classes that spare a chmod process per file and a readlink process per Delta commit (setup builds them):
    # the file system Spark writes data files with, and the FileContext one Delta writes commit files with, as the
    # session's Hadoop settings name them (on the warm engine, the engine's).
    assert spark.conf.get("spark.hadoop.fs.file.impl") == LOCAL_FS_CLASS
    assert spark.conf.get("spark.hadoop.fs.AbstractFileSystem.file.impl") == LOCAL_FS_CONTEXT_CLASS
    table = Path(table_path("fact_order_item"))
    day_folder = table / "order_date=2025-01-05"
    # Hadoop applies a umask of its own (FILE_UMASK as spark.hadoop.fs.permissions.umask-mode), not the process's.
    assert stat.S_IMODE(day_folder.stat().st_mode) == 0o700
    assert {stat.S_IMODE(f.stat().st_mode) for f in day_folder.glob("*.parquet")} == {0o600}
    assert {stat.S_IMODE(f.stat().st_mode) for f in (table / "_delta_log").glob("*.json")} == {0o600}


def test_a_command_line_backfill_links_to_its_runs_reports_each_chunk_and_is_audited_under_its_id(spark, built, capsys):
    from exact_backfills.cli import main
    from resources import audit

    assert main(["backfill", "--start", "2025-01-10", "--end", "2025-01-12", "--max-partitions-per-run", "2"]) == 0
    out = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("  estimated time")]
    backfill_id = out[0].split()[1].rstrip(":")
    table_days = 3 * len(selected_keys(ORDERS, None))  # every asset, side tables included
    assert out[1].startswith(f"backfill {backfill_id}: 2 run(s), {table_days} table-day(s) to write"), out[1]
    assert out[3].strip() == f"its runs in the Dagster UI: {runs_url(backfill_id)}"
    assert "runs?q%5B%5D=tag%3Aexact_backfills%2Fbackfill%3D" + backfill_id in out[3]
    assert out[4].startswith("  [1/2] 2025-01-10..2025-01-11 ok in ") and out[4].endswith("s to go")
    assert out[5].startswith("  [2/2] 2025-01-12..2025-01-12 ok in ") and "to go" not in out[5]
    assert out[6].startswith(f"backfill {backfill_id} measured: 2 run(s), {table_days} table-day(s) built in ")
    written = audit.read(spark, ORDERS.name).where(f"backfill_id = '{backfill_id}'")
    assert written.select("asset", "partition").distinct().count() == 3 * len(TABLES)


def _scanned(instance, table, day):
    """What the latest materialization of `table` on `day` says its run scanned, per source."""
    from dagster import AssetKey, AssetRecordsFilter

    record = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey(table), asset_partitions=[day.isoformat()]), limit=1
    ).records[0]
    return record.asset_materialization.metadata["scanned"].value


def batches_that_can_hold(spark, day, landed=None):
    """Oracle written without the index: the batches with a row dated `day` or filed there by quarantine (its batch's
    day), and every batch holding a version of an item that has a version dated `day`. `landed`: the landing's rows,
    when already read."""
    landed = landed if landed is not None else landing.read_landing(spark, ORDER_ITEMS).collect()
    keys_on_day = {(r.order_id, r.order_item_id) for r in landed if r.order_date == day and r.order_id is not None}
    return {
        r.ingest_date
        for r in landed
        if r.order_date == day or r.ingest_date == day or (r.order_id, r.order_item_id) in keys_on_day
    }


def test_a_one_day_run_reads_only_its_day_of_a_table_and_only_the_landed_batches_that_can_hold_it(spark, built):
    day = date(2025, 1, 20)
    before = {t: rows(spark, t) for t in TABLES}

    assert run_backfill(
        BackfillRequest(ORDERS, day, day, select=["stg_order_items"]), instance=built, echo=lambda _: None
    )
    landing_read = _scanned(built, "stg_order_items", day)["landing/order_items"]
    expected = batches_that_can_hold(spark, day)
    landed_dirs = landing.batch_dirs(ORDER_ITEMS)
    assert landing_read["batches"] == len(expected) < landing_read["batches_total"] == len(landed_dirs)
    assert landing_read["files"] == sum(
        1
        for d in landed_dirs
        if date.fromisoformat(landing.batch_name(d)) in expected
        for f in Path(d.path).glob("*.parquet")
    )
    assert landing_read["bytes"] < landing_read["bytes_total"]

    assert run_backfill(
        BackfillRequest(ORDERS, day, day, select=["daily_revenue"]), instance=built, echo=lambda _: None
    )
    fact_read = _scanned(built, "daily_revenue", day)["fact_order_item"]
    fact_files = files_by_day(spark, "fact_order_item", "order_date")
    assert fact_read["files"] == len(fact_files[day.isoformat()]) == 1
    assert fact_read["files_total"] == sum(len(f) for f in fact_files.values())
    assert fact_read["bytes"] < fact_read["bytes_total"]

    assert {t: rows(spark, t) for t in TABLES} == before  # and what it built from them is what the whole landing gives


def test_a_build_that_reads_the_whole_landing_indexes_its_batches_as_a_narrowed_build_would_have(spark, built):
    """A build over every day reads the whole landing anyway: it indexes the batches from that read, so that the first
    narrowed build after it does not read the whole landing again; the index is the one a narrowed build makes."""
    import shutil

    from exact_backfills import builds, landing_index

    index_path = Path(control_path(ORDERS.name, landing_index.INDEX_TABLE))
    made_by_a_narrowed_build = landing_index.update(spark, ORDERS)
    assert made_by_a_narrowed_build[ORDER_ITEMS.name]
    shutil.rmtree(index_path)

    every_day = ORDERS.partitions.days
    assert not builds.narrowed(every_day, ORDERS.partitions)
    builds.build_events(spark, ORDERS, ORDERS.staging[ORDER_ITEMS.name], every_day).unpersist()

    assert index_path.exists()
    index = landing_index.indexed(spark, ORDERS)
    assert index == made_by_a_narrowed_build
    landed = landing.read_landing(spark, ORDER_ITEMS).collect()
    batches = [landing.batch_name(d) for d in landing.batch_dirs(ORDER_ITEMS)]
    moved = 0
    for day in every_day:  # every day: the keys whose versions are on several days among them
        holding = set(landing_index.holding(index[ORDER_ITEMS.name], batches, [day]))
        expected = {d.isoformat() for d in batches_that_can_hold(spark, day, landed)}
        assert holding == expected, day
        moved += len(expected - {r.ingest_date.isoformat() for r in landed if day in (r.order_date, r.ingest_date)})
    assert moved  # some day is held by a batch only through a key's version on another day


def test_a_read_of_the_landing_measures_the_files_it_reads_even_when_an_equal_read_is_cached(spark, built):
    """Once a read is cached (on a warm engine, by any session), Spark plans later equal reads as that cache, whose
    plan names no file. What a build reads, which decides how its change is evaluated, what its materializations say
    it scanned and which batches it indexes, comes from the files listed for the read: the same with or without it."""
    uncached = landing.landing_read(spark, ORDER_ITEMS)
    assert uncached.scan.bytes > 0 and uncached.batches
    cached = landing.read_landing(spark, ORDER_ITEMS).persist()
    try:
        cached.count()
        assert landing.read_landing(spark, ORDER_ITEMS).inputFiles() == []  # Spark's own view of it
        again = landing.landing_read(spark, ORDER_ITEMS)
        assert (again.scan, again.batches) == (uncached.scan, uncached.batches)
    finally:
        cached.unpersist()


def test_a_batch_indexed_while_its_days_were_past_the_partitions_is_found_for_them_once_the_partitions_widen(
    spark, built
):
    """Widening PARTITION_END_DATE later must not hide landed rows from a narrowed build of a newly covered day: the
    index holds every day of a batch, not only the days inside the partitions when it was indexed."""
    import shutil

    from exact_backfills import landing_index
    from tests.support.lake import environment

    index_path = Path(control_path(ORDERS.name, landing_index.INDEX_TABLE))
    day = date(2025, 1, 20)
    shutil.rmtree(index_path)
    try:
        with environment(PARTITION_END_DATE=(day - timedelta(days=3)).isoformat()):
            landing_index.update(spark, ORDERS)  # `day` and the days before it are past the partitions' end
        for later in (day - timedelta(days=1), day):
            holding = set(landing_index.batches_holding(spark, ORDERS, ORDER_ITEMS, [later]))
            assert holding == {d.isoformat() for d in batches_that_can_hold(spark, later)}, later
    finally:
        shutil.rmtree(index_path)  # indexed afresh by the next build


def test_a_backfill_says_what_it_will_write_and_read_and_how_long_it_should_take_and_a_dry_run_writes_nothing(
    spark, built, capsys
):
    from exact_backfills.cli import main

    days = ["--start", "2025-01-20", "--end", "2025-01-21", "--select", "daily_revenue"]
    fact_files = files_by_day(spark, "fact_order_item", "order_date")
    before = {t: versions(spark, t)[0] for t in TABLES}

    assert main(["backfill", *days, "--dry-run"]) == 0
    dry_run = capsys.readouterr().out

    assert {t: versions(spark, t)[0] for t in TABLES} == before
    assert ": 1 run(s), 2 table-day(s) to write (daily_revenue 2)" in dry_run, dry_run
    # It reads the fact's files of those two days, and no landed batch.
    files = len(fact_files["2025-01-20"]) + len(fact_files["2025-01-21"])
    assert f"  reads 0 landed batch(es) (0 B) and {files} published file(s)" in dry_run, dry_run
    fitted = dry_run.split("estimated time: ")[1]
    assert "s per table-day, fitted from " in fitted and " embedded run(s))" in fitted, dry_run  # the runs above
    assert dry_run.rstrip().endswith("dry run: nothing written")

    assert main(["backfill", *days]) == 0
    ran = capsys.readouterr().out
    assert ": 1 run(s), 2 table-day(s) to write (daily_revenue 2)" in ran
    assert " measured: 1 run(s), 2 table-day(s) built in " in ran and "(estimated: 1 run(s), 2 table-day(s), " in ran
