"""The command line says what went wrong, and its exit code says whether it worked."""

from datetime import date

import pytest

from assets_pkg.cli import main


@pytest.fixture(autouse=True)
def _lake(lake):
    return lake


def test_backfill_of_an_empty_lake_fails_and_names_the_missing_landing(capsys, lake):
    assert main(["backfill", "--start", "2025-01-01", "--end", "2025-01-02", "--select", "stg_order_items"]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "no landed batches under" in out


def test_backfill_outside_the_partitions_is_refused(capsys):
    assert main(["backfill", "--start", "2024-12-01", "--end", "2025-01-02"]) == 2
    assert "not within the partitions 2025-01-01..2025-03-31" in capsys.readouterr().err


def test_backfill_of_an_unknown_asset_is_refused(capsys):
    assert main(["backfill", "--select", "no_such_table"]) == 2
    assert "unknown asset(s): no_such_table" in capsys.readouterr().err


def test_landing_is_append_only_a_landed_batch_is_never_rewritten(capsys, lake):
    root, _ = lake
    assert main(["generate", "--start", "2025-01-01", "--end", "2025-01-03", "--rows-per-day", "5"]) == 0
    batch = root / "landing" / "order_items" / "ingest_date=2025-01-02"
    files_before = sorted(p.name for p in batch.iterdir())
    assert main(["generate", "--start", "2025-01-01", "--end", "2025-01-03", "--rows-per-day", "5"]) == 2
    assert "batches already landed for" in capsys.readouterr().err
    assert sorted(p.name for p in batch.iterdir()) == files_before


def test_generate_is_deterministic_for_a_seed(spark, tmp_path, monkeypatch):
    from assets_pkg import landing
    from assets_pkg.generate import generate

    def land(root):
        monkeypatch.setenv("LAKE_ROOT", str(root))
        generate(spark, date(2025, 1, 1), date(2025, 1, 4), seed=3, rows_per_day=20, bad_rate=0.1)
        df = landing.read_landing(spark, landing.ORDER_ITEMS).drop("source_file")
        return sorted((r.asDict() for r in df.collect()), key=repr)

    assert land(tmp_path / "a") == land(tmp_path / "b")
