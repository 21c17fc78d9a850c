"""Bad batches never stop the pipeline and never lose a row: the landing contract is checked when a batch is read.
Valid data in other encodings is read correctly; a file that breaks the contract is refused, named with its reason,
held in quarantine, and later batches are restated as usual; `withdraw` takes it out of the landing.

The tests share one lake and run in file order."""

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql import types as T

from assets_pkg.generate import generate
from exact_backfills import ColumnRetyped, landing
from exact_backfills.backfill import BackfillRequest, run_backfill, run_restatement
from exact_backfills.cli import main
from exact_backfills.publish import KILL_AT
from resources.delta_io import read_table
from resources.lake import REPO_ROOT, lake_root, landing_path
from tests.support.lake import rows
from tests.support.landing_files import ORDER_ITEM_ARROW_TYPES
from tests.support.orders import ORDER_ITEMS, ORDERS, QUARANTINE_ORDER_ITEMS, STG_ORDER_ITEMS

pytestmark = pytest.mark.slow  # builds a lake and runs restatements: minutes, not seconds

START, END = date(2025, 1, 1), date(2025, 1, 10)
DAY = date(2025, 1, 4)
UPDATED = datetime(2025, 1, 4, 9, 30, 15, 123456, tzinfo=UTC)

CONTRACT = ORDER_ITEM_ARROW_TYPES


def item(order_id: int, batch: date) -> dict:
    return {
        "order_id": order_id,
        "order_item_id": 1,
        "order_date": DAY,
        "customer_id": 7,
        "product_id": 1,
        "channel": "web",
        "quantity": 2,
        "gross_amount": Decimal("20.00"),
        "discount_amount": Decimal("1.00"),
        "cost_amount": Decimal("12.00"),
        "updated_at": UPDATED,
        "ingested_at": datetime.combine(batch, datetime.min.time(), tzinfo=UTC) + timedelta(hours=2),
    }


def write_file(batch: date, name: str, records: list[dict], types: dict | None = None, **options) -> str:
    """A Parquet file in the batch's folder, as an outside producer writes it (pyarrow), with `types` overriding the
    contract's column types (a column typed None is left out). Returns its name as `check` reports it."""
    types = {**CONTRACT, **(types or {})}
    columns = {c: t for c, t in types.items() if t is not None}
    table = pa.table({c: pa.array([r.get(c) for r in records], t) for c, t in columns.items()})
    folder = Path(landing_path(ORDER_ITEMS.name)) / f"ingest_date={batch}"
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / name, **options)
    return f"ingest_date={batch}/{name}"


@pytest.fixture(scope="module")
def built(spark, lake):
    _, instance = lake
    summary = generate(spark, START, END, seed=3, rows_per_day=6)
    assert run_backfill(BackfillRequest(ORDERS, START, END), instance=instance, echo=lambda _: None)
    return instance, date.fromisoformat(max(summary.batches)) + timedelta(days=1)


@pytest.fixture(scope="module")
def landed(built):
    """One batch of files in every encoding and with every defect the contract knows, then a restatement."""
    instance, batch = built
    good = {
        # pandas' default: INT64 nanoseconds. Valid data, read as such.
        "nanos.parquet": (
            [item(8_000_001, batch)],
            {"updated_at": pa.timestamp("ns", tz="UTC"), "ingested_at": pa.timestamp("ns", tz="UTC")},
            {},
        ),
        "int96.parquet": ([item(8_000_002, batch)], {}, {"use_deprecated_int96_timestamps": True}),
        "micros.parquet": ([item(8_000_003, batch)], {}, {}),
        # A file the contract accepts, with a row that breaks a rule of the source: quarantined on its own day.
        "negative.parquet": ([{**item(8_000_007, batch), "quantity": -1}], {}, {}),
    }
    bad = {
        "missing_channel.parquet": ([item(8_000_004, batch)], {"channel": None}, "missing column channel"),
        "amount_as_text.parquet": (
            [{**item(8_000_005, batch), "gross_amount": "20.00"}],
            {"gross_amount": pa.string()},
            "column gross_amount is string, the contract says decimal(18,2)",
        ),
    }
    names = {}
    for name, (records, types, options) in good.items():
        names[name] = write_file(batch, name, records, types, **options)
    for name, (records, types, _) in bad.items():
        names[name] = write_file(batch, name, records, types)
    extra = write_file(
        batch, "extra_column.parquet", [{**item(8_000_006, batch), "coupon": "X"}], {"coupon": pa.string()}
    )
    folder = Path(landing_path(ORDER_ITEMS.name)) / f"ingest_date={batch}"
    (folder / "zero_bytes.parquet").write_bytes(b"")
    (folder / "corrupt.parquet").write_bytes(b"PAR1 this is not parquet at all PAR1")
    (Path(landing_path(ORDER_ITEMS.name)) / "ingest_date=latest").mkdir()
    result = run_restatement(ORDERS, instance)
    assert result.success
    return instance, batch, names, extra


def test_nanosecond_int96_and_microsecond_timestamps_are_read_as_the_same_instants(spark, landed):
    staged = {
        r.order_id: r
        for r in read_table(spark, STG_ORDER_ITEMS).where("order_id BETWEEN 8000001 AND 8000003").collect()
    }
    assert sorted(staged) == [8_000_001, 8_000_002, 8_000_003]
    assert {r.updated_at.replace(tzinfo=UTC) for r in staged.values()} == {UPDATED}


def test_a_widened_column_is_read_from_the_batches_landed_before_it_cast_to_its_new_type_value_for_value(spark, landed):
    _, batch, _, _ = landed
    earlier = sorted(b for d in landing.batch_dirs(ORDER_ITEMS) if (b := landing.batch_name(d)) < str(batch))[-2:]
    before = date.fromisoformat(earlier[-1])
    wide = [T.StructField(f.name, T.LongType()) if f.name == "quantity" else f for f in ORDER_ITEMS.schema.fields]
    widened = replace(
        ORDER_ITEMS, schema=T.StructType(wide), columns_retyped=[ColumnRetyped("quantity", T.IntegerType(), before)]
    )

    as_landed = landing.read_landing(spark, ORDER_ITEMS, earlier)
    as_widened = landing.read_landing(spark, widened, earlier)

    assert as_widened.schema["quantity"].dataType == T.LongType()
    assert sorted(map(Row.asDict, as_widened.collect()), key=str) == sorted(
        map(Row.asDict, as_landed.collect()), key=str
    )
    assert as_widened.count() > 0 and not landing.landed_files(widened, earlier).refused
    # A later batch still storing the former type breaks the contract: refused by name, never read.
    later = landing.landed_files(widened, [str(batch)]).refused
    assert "column quantity is int32, the contract says bigint" in {r.reason for r in later}


def test_each_refused_file_is_held_in_quarantine_naming_the_file_and_why(spark, landed):
    _, batch, names, extra = landed
    held = {
        r.source_file: r.reason
        for r in read_table(spark, QUARANTINE_ORDER_ITEMS).where("reason LIKE 'refused_file%'").collect()
    }
    expected = {
        names["missing_channel.parquet"]: "refused_file: missing column channel",
        names["amount_as_text.parquet"]: "refused_file: column gross_amount is string, the contract says decimal(18,2)",
        extra: "refused_file: unexpected column coupon",
    }
    for file, reason in expected.items():
        assert held[file] == reason
    assert held[f"ingest_date={batch}/zero_bytes.parquet"] == "refused_file: zero-byte file"
    assert held[f"ingest_date={batch}/corrupt.parquet"].startswith("refused_file: not a readable Parquet file")
    # Nothing of a refused file is published.
    assert read_table(spark, STG_ORDER_ITEMS).where("order_id BETWEEN 8000004 AND 8000006").count() == 0


def test_check_names_every_refused_file_and_folder(landed, capsys):
    _, batch, names, _ = landed
    assert main(["check", "--asset", STG_ORDER_ITEMS, "--start", str(START), "--end", str(END)]) == 1
    out = capsys.readouterr().out
    assert f"REFUSED order_items/{names['missing_channel.parquet']}: missing column channel" in out
    assert "REFUSED order_items/ingest_date=latest: not a batch folder" in out
    assert f"REFUSED order_items/ingest_date={batch}/corrupt.parquet: not a readable Parquet file" in out


def test_quarantine_shows_each_days_rows_by_reason_and_fails_on_the_day_of_a_refused_file(landed, capsys):
    _, batch, names, extra = landed
    # The day of the row breaking a rule: shown, with its reason, and passing: it is accounted for.
    assert main(["check", "--asset", QUARANTINE_ORDER_ITEMS, "--start", str(DAY), "--end", str(DAY)]) == 1
    out = capsys.readouterr().out  # (exit 1: the landing's refused files, named below the checks)
    assert f"{QUARANTINE_ORDER_ITEMS}: 1/1 check results passed over {DAY}..{DAY}" in out, out
    assert "1 row(s) quarantined by reason: negative_or_null_quantity 1" in out, out
    # The batch's day holds the refused files, unread: the check fails there, naming them.
    assert main(["check", "--asset", QUARANTINE_ORDER_ITEMS, "--start", str(batch), "--end", str(batch)]) == 1
    out = capsys.readouterr().out
    assert "5 row(s) quarantined by reason: refused_file 5; 5 refused file(s)" in out, out
    failing = next(line for line in out.splitlines() if "FAIL quarantined_rows" in line)
    assert failing.startswith(f"  FAIL quarantined_rows {batch}: refused_files=") and extra in failing, failing
    assert names["missing_channel.parquet"] in failing, failing
    # `report` goes through the quarantine tables too, day by day.
    assert main(["report", "--start", str(DAY), "--end", str(DAY)]) == 0
    out = capsys.readouterr().out
    assert f"{QUARANTINE_ORDER_ITEMS}:\n  {DAY} rows=1 " in out, out


def test_a_later_good_batch_is_restated_as_usual(spark, landed):
    instance, batch, _, _ = landed
    write_file(batch + timedelta(days=1), "good.parquet", [item(8_000_010, batch + timedelta(days=1))])
    assert run_restatement(ORDERS, instance).success
    assert read_table(spark, STG_ORDER_ITEMS).where("order_id = 8000010").count() == 1


def test_withdrawing_a_refused_file_moves_it_aside_with_why_and_republishes_its_days(spark, landed, capsys):
    _, batch, names, _ = landed
    file = f"order_items/{names['missing_channel.parquet']}"
    assert main(["withdraw", "--file", file, "--reason", "producer sent an old schema"]) == 0
    out = capsys.readouterr().out
    assert "withdrew" in out
    assert not (Path(landing_path(ORDER_ITEMS.name)) / names["missing_channel.parquet"]).exists()
    quarantined = read_table(spark, QUARANTINE_ORDER_ITEMS).where(
        F.col("source_file") == names["missing_channel.parquet"]
    )
    assert quarantined.count() == 0


def test_withdrawing_a_published_file_removes_its_rows_and_restores_the_previous_versions(spark, landed, capsys):
    _, batch, names, _ = landed
    before = rows(spark, STG_ORDER_ITEMS)
    file = write_file(
        batch + timedelta(days=2),
        "correction.parquet",
        [{**item(8_000_003, batch + timedelta(days=2)), "quantity": 5, "updated_at": UPDATED + timedelta(days=1)}],
    )
    instance = landed[0]
    assert run_restatement(ORDERS, instance).success
    assert read_table(spark, STG_ORDER_ITEMS).where("order_id = 8000003").first().quantity == 5
    assert main(["withdraw", "--file", f"order_items/{file}", "--reason", "sent twice by mistake"]) == 0
    capsys.readouterr()
    assert rows(spark, STG_ORDER_ITEMS) == before


def _withdrawal_notes() -> dict[str, dict]:
    return {str(p): json.loads(p.read_text()) for p in (Path(lake_root()) / "withdrawn").rglob("*.withdrawn.json")}


def test_a_withdrawal_killed_between_its_note_and_its_move_is_finished_by_running_it_again(spark, landed, capsys):
    instance, batch, _, _ = landed
    day = batch + timedelta(days=3)
    file = write_file(day, "resent.parquet", [item(8_000_020, day)])
    assert run_restatement(ORDERS, instance).success
    assert read_table(spark, STG_ORDER_ITEMS).where("order_id = 8000020").count() == 1
    withdraw = ["withdraw", "--file", f"order_items/{file}", "--reason", "resent by mistake"]
    notes_before = _withdrawal_notes()
    killed = subprocess.run(
        [sys.executable, "-m", "assets_pkg", *withdraw],
        cwd=REPO_ROOT,
        env={**os.environ, KILL_AT: "withdraw:after-note"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -9, (killed.returncode, killed.stdout[-2000:], killed.stderr[-2000:])
    # Killed with its intent written and nothing moved: the note says what is under way, the file is still landed.
    started = {p: n for p, n in _withdrawal_notes().items() if p not in notes_before}
    assert [(n["file"], n["status"], n["reason"]) for n in started.values()] == [
        (file, "withdrawing", "resent by mistake")
    ]
    landed = Path(landing_path(ORDER_ITEMS.name)) / file
    bad = landed.read_bytes()
    ((note_path, started_note),) = started.items()
    # Other bytes landed under its name meanwhile: run again, it refuses in one line naming the file, moving nothing.
    write_file(day, "resent.parquet", [item(8_000_022, day)])
    assert main(withdraw) == 2
    said = capsys.readouterr().err.strip()
    assert "\n" not in said and str(landed) in said and started_note["sha256"] in said, said
    assert landed.read_bytes() != bad and not Path(started_note["moved_to"]).exists()
    assert json.loads(Path(note_path).read_text())["status"] == "withdrawing"
    assert (started_note["size"], started_note["sha256"]) == (len(bad), hashlib.sha256(bad).hexdigest())
    # The file it began to withdraw back, run again, it goes on from its note: the file moved, its rows gone, the
    # withdrawal recorded as done.
    landed.write_bytes(bad)
    assert main(withdraw) == 0
    capsys.readouterr()
    note = json.loads(Path(note_path).read_text())
    assert note["status"] == "published"
    assert not (Path(landing_path(ORDER_ITEMS.name)) / file).exists()
    assert Path(note["moved_to"]).is_file()
    assert read_table(spark, STG_ORDER_ITEMS).where("order_id = 8000020").count() == 0
    # A file of the same name landed and withdrawn again is kept beside the first, never over it.
    assert write_file(day, "resent.parquet", [item(8_000_021, day)]) == file
    assert main([*withdraw[:-1], "sent a third time"]) == 0
    capsys.readouterr()
    second = [n for p, n in _withdrawal_notes().items() if p not in notes_before and p != note_path]
    assert [(n["status"], n["reason"]) for n in second] == [("published", "sent a third time")]
    assert second[0]["moved_to"] != note["moved_to"]
    kept = {Path(n["moved_to"]): n for n in (note, second[0])}
    assert all(p.is_file() for p in kept)
    assert pq.read_table(Path(note["moved_to"])).column("order_id").to_pylist() == [8_000_020]
