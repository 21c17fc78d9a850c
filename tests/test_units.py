"""The pure logic, without Spark: the publish order, the landing contract's verdict on a file, what a failure between
commits says, the settings, when a folder is a Delta table (the day decisions: tests/test_day_decisions.py)."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import types as T

from exact_backfills import landing
from exact_backfills.dagster_names import PREVIEW_JOB
from exact_backfills.publish import Change, Operation, PartlyPublished
from resources.delta_io import Commit, is_delta_table
from tests.support.landing_files import ORDER_ITEM_ARROW_TYPES
from tests.support.orders import ORDER_ITEMS, ORDERS, PUBLISH_ORDER, TABLES

D = date(2025, 1, 1)


def day(n: int) -> date:
    return D + timedelta(days=n)


def test_every_table_is_published_after_every_table_it_reads():
    position = {name: i for i, name in enumerate(PUBLISH_ORDER)}
    assert set(position) == {t.name for t in TABLES}
    for t in TABLES:
        assert all(position[u] < position[t.name] for u in t.upstream), t.name
    # What a change to the fact carries into: the fact, then every table that reads it, in the publish order.
    derived = ORDERS.downstream({"fact_order_item"})
    assert derived[0] == "fact_order_item" and {"stg_order_items", "dim_product"}.isdisjoint(derived)
    assert derived == [t for t in PUBLISH_ORDER if t in derived]
    assert set(derived[1:]) == {t.name for t in TABLES if "fact_order_item" in t.upstream} | {"daily_revenue"}


def _write(path, types: dict, values: dict, **options):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({c: pa.array([values[c]], t) for c, t in types.items()}), path, **options)


CONTRACT = ORDER_ITEM_ARROW_TYPES
ROW = {
    "order_id": 1,
    "order_item_id": 1,
    "order_date": D,
    "customer_id": 1,
    "product_id": 1,
    "channel": "web",
    "quantity": 1,
    "gross_amount": Decimal("1.00"),
    "discount_amount": Decimal("0.00"),
    "cost_amount": Decimal("0.50"),
    "updated_at": datetime(2025, 1, 1, tzinfo=UTC),
    "ingested_at": datetime(2025, 1, 2, tzinfo=UTC),
}


def test_the_landing_contract_reads_every_timestamp_encoding_and_refuses_what_it_cannot_read_by_name(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("LAKE_ROOT", str(tmp_path))
    batch = tmp_path / "landing" / "order_items" / "ingest_date=2025-01-02"
    nanos = {**CONTRACT, "updated_at": pa.timestamp("ns", tz="UTC")}
    _write(batch / "micros.parquet", CONTRACT, ROW)
    _write(batch / "millis.parquet", {**CONTRACT, "updated_at": pa.timestamp("ms", tz="UTC")}, ROW)
    _write(batch / "int96.parquet", CONTRACT, ROW, use_deprecated_int96_timestamps=True)
    _write(batch / "nanos.parquet", nanos, ROW)
    _write(batch / "text.parquet", {**CONTRACT, "quantity": pa.string()}, {**ROW, "quantity": "1"})
    _write(batch / "wide.parquet", {**CONTRACT, "note": pa.string()}, {**ROW, "note": "x"})
    _write(batch / "narrow.parquet", {c: t for c, t in CONTRACT.items() if c != "channel"}, ROW)
    (batch / "empty.parquet").write_bytes(b"")
    (batch / "_SUCCESS").write_bytes(b"")  # a writer's marker, not data

    found = landing.landed_files(ORDER_ITEMS)
    assert sorted(p.rsplit("/", 1)[1] for p in found.plain) == ["int96.parquet", "micros.parquet", "millis.parquet"]
    assert [[p.rsplit("/", 1)[1] for p in paths] for paths in found.converted.values()] == [["nanos.parquet"]]
    assert list(found.converted) == [(landing.Conversion("updated_at", T.LongType(), nanos=True),)]
    assert {r.file: r.reason for r in found.refused} == {
        "ingest_date=2025-01-02/empty.parquet": "zero-byte file",
        "ingest_date=2025-01-02/narrow.parquet": "missing column channel",
        "ingest_date=2025-01-02/text.parquet": "column quantity is string, the contract says int",
        "ingest_date=2025-01-02/wide.parquet": "unexpected column note",
    }


def _read_and_refused(found) -> tuple[list[str], dict[str, str]]:
    """The landed files the contract accepts (batch/file, sorted), and those it refuses with why."""
    read = sorted(p.rsplit("/", 2)[1] + "/" + p.rsplit("/", 1)[1] for p in found.plain)
    return read, {r.file: r.reason for r in found.refused}


def test_a_column_the_contract_gained_may_be_missing_from_the_batches_before_it_and_from_no_later_one(
    tmp_path, monkeypatch
):
    import dataclasses

    from pyspark.sql import types as T

    from exact_backfills import ColumnAdded

    monkeypatch.setenv("LAKE_ROOT", str(tmp_path))
    gained = dataclasses.replace(
        ORDER_ITEMS,
        schema=T.StructType([*ORDER_ITEMS.schema.fields, T.StructField("coupon_code", T.StringType())]),
        columns_added=[ColumnAdded("coupon_code", date(2025, 1, 3))],
    )
    landed = tmp_path / "landing" / "order_items"
    _write(landed / "ingest_date=2025-01-02" / "before.parquet", CONTRACT, ROW)
    _write(landed / "ingest_date=2025-01-03" / "without.parquet", CONTRACT, ROW)
    _write(
        landed / "ingest_date=2025-01-03" / "with.parquet",
        {**CONTRACT, "coupon_code": pa.string()},
        {**ROW, "coupon_code": "X"},
    )

    found = landing.landed_files(gained)
    assert _read_and_refused(found)[0] == [
        "ingest_date=2025-01-02/before.parquet",
        "ingest_date=2025-01-03/with.parquet",
    ]
    assert _read_and_refused(found)[1] == {"ingest_date=2025-01-03/without.parquet": "missing column coupon_code"}
    assert gained.problems() == []
    required = dataclasses.replace(gained, columns_added=[ColumnAdded("channel", D), ColumnAdded("order_id", D)])
    assert required.problems() == ["its added column order_id is not nullable: the batches before it read it as null"]
    keyed = dataclasses.replace(gained, columns_added=[ColumnAdded("updated_at", D), ColumnAdded("note", D)])
    assert keyed.problems() == [
        "its added column updated_at is not nullable: the batches before it read it as null",
        "its added column note is not a column of its schema",
    ]


def test_a_column_the_contract_dropped_may_be_carried_by_the_batches_up_to_its_last_and_by_no_later_one(
    tmp_path, monkeypatch
):
    import dataclasses

    from pyspark.sql import types as T

    from exact_backfills import ColumnDropped

    monkeypatch.setenv("LAKE_ROOT", str(tmp_path))
    dropped = dataclasses.replace(
        ORDER_ITEMS,
        schema=T.StructType([f for f in ORDER_ITEMS.schema.fields if f.name != "channel"]),
        columns_dropped=[ColumnDropped("channel", date(2025, 1, 2))],
    )
    landed = tmp_path / "landing" / "order_items"
    narrow = {c: t for c, t in CONTRACT.items() if c != "channel"}
    _write(landed / "ingest_date=2025-01-02" / "before.parquet", CONTRACT, ROW)
    _write(landed / "ingest_date=2025-01-03" / "with.parquet", CONTRACT, ROW)
    _write(landed / "ingest_date=2025-01-03" / "without.parquet", narrow, ROW)

    found = landing.landed_files(dropped)
    assert _read_and_refused(found)[0] == [
        "ingest_date=2025-01-02/before.parquet",
        "ingest_date=2025-01-03/without.parquet",
    ]
    assert _read_and_refused(found)[1] == {"ingest_date=2025-01-03/with.parquet": "unexpected column channel"}
    assert dropped.problems() == []
    kept = dataclasses.replace(ORDER_ITEMS, columns_dropped=[ColumnDropped("channel", D)])
    assert kept.problems() == ["its dropped column channel is still a column of its schema"]
    # Undeclared, the same change refuses every file landed before it, by name: none of them is read.
    undeclared = dataclasses.replace(dropped, columns_dropped=[])
    assert {r.file for r in landing.landed_files(undeclared).refused} == {
        "ingest_date=2025-01-02/before.parquet",
        "ingest_date=2025-01-03/with.parquet",
    }


def test_a_column_the_contract_widened_may_keep_its_former_type_in_the_batches_up_to_its_last_and_in_no_later_one(
    tmp_path, monkeypatch
):
    import dataclasses

    from exact_backfills import ColumnRetyped

    monkeypatch.setenv("LAKE_ROOT", str(tmp_path))
    wide = [T.StructField(f.name, T.LongType()) if f.name == "quantity" else f for f in ORDER_ITEMS.schema.fields]
    widened = dataclasses.replace(
        ORDER_ITEMS, schema=T.StructType(wide), columns_retyped=[ColumnRetyped("quantity", T.IntegerType(), day(1))]
    )
    landed = tmp_path / "landing" / "order_items"
    as_long = {**CONTRACT, "quantity": pa.int64()}
    _write(landed / "ingest_date=2025-01-02" / "before.parquet", CONTRACT, ROW)
    _write(landed / "ingest_date=2025-01-02" / "wide.parquet", as_long, ROW)
    _write(landed / "ingest_date=2025-01-03" / "narrow.parquet", CONTRACT, ROW)
    _write(landed / "ingest_date=2025-01-03" / "wide.parquet", as_long, ROW)

    found = landing.landed_files(widened)
    assert _read_and_refused(found)[0] == ["ingest_date=2025-01-02/wide.parquet", "ingest_date=2025-01-03/wide.parquet"]
    assert [[p.rsplit("/", 2)[1] for p in paths] for paths in found.converted.values()] == [["ingest_date=2025-01-02"]]
    assert list(found.converted) == [(landing.Conversion("quantity", T.IntegerType()),)]  # read as int, cast to long
    assert _read_and_refused(found)[1] == {
        "ingest_date=2025-01-03/narrow.parquet": "column quantity is int32, the contract says bigint"
    }
    assert widened.problems() == []
    # Only a widening keeps every landed value; anything else is refused in one line saying what to do instead.
    narrowed = dataclasses.replace(widened, columns_retyped=[ColumnRetyped("quantity", T.DecimalType(20, 2), D)])
    assert narrowed.problems() == [
        "its retyped column quantity was decimal(20,2), which bigint does not widen: a retype keeps every landed value "
        "(a wider integer, decimal or floating type); land the column under a new name instead"
    ]
    unknown = dataclasses.replace(widened, columns_retyped=[ColumnRetyped("coupon", T.IntegerType(), D)])
    assert unknown.problems() == ["its retyped column coupon is not a column of its schema"]


@pytest.mark.parametrize(
    "was, now, widens",
    [
        (T.IntegerType(), T.LongType(), True),
        (T.ShortType(), T.IntegerType(), True),
        (T.LongType(), T.IntegerType(), False),
        (T.FloatType(), T.DoubleType(), True),
        (T.IntegerType(), T.DoubleType(), True),
        (T.LongType(), T.DoubleType(), False),  # a long's every value is not a double's
        (T.DecimalType(18, 2), T.DecimalType(20, 2), True),
        (T.DecimalType(18, 2), T.DecimalType(20, 4), True),
        (T.DecimalType(18, 2), T.DecimalType(19, 4), False),  # one integer digit fewer
        (T.DecimalType(18, 2), T.DecimalType(18, 1), False),
        (T.IntegerType(), T.DecimalType(12, 2), True),
        (T.LongType(), T.DecimalType(20, 1), False),
        (T.IntegerType(), T.StringType(), False),
        (T.DateType(), T.TimestampType(), False),
    ],
)
def test_a_retype_widens_only_when_every_value_of_the_former_type_reads_the_same(was, now, widens):
    from exact_backfills.sources import widens as widening

    assert widening(was, now) is widens


def test_a_failure_between_commits_names_the_operation_and_what_was_committed_with_its_version_and_days():
    change = Change(Operation.BACKFILL, {"stg_order_items": [day(0), day(1)], "fact_order_item": [day(0), day(1)]})
    commits = {
        "quarantine_order_items": Commit("quarantine_order_items", None, 0, 0, 0),
        "stg_order_items": Commit("stg_order_items", 7, 10, 2, 2),
    }
    error = PartlyPublished(ORDERS, change, commits, RuntimeError("ConcurrentAppendException: files were added"))
    assert str(error).startswith(
        "backfill failed after committing quarantine_order_items (no change, 2025-01-01..2025-01-02), stg_order_items "
        "(version 7, 2025-01-01..2025-01-02); not committed: fact_order_item (RuntimeError: ConcurrentAppendException"
    )


@pytest.mark.parametrize(
    "variable, value, said",
    [
        ("PARTITION_START_DATE", "2025-13-01", "PARTITION_START_DATE='2025-13-01' is not a YYYY-MM-DD date"),
        ("PARTITION_END_DATE", "2024-12-31", "PARTITION_END_DATE=2024-12-31 is before PARTITION_START_DATE=2025-01-01"),
        ("BACKFILL_MAX_PARTITIONS_PER_RUN", "0", "BACKFILL_MAX_PARTITIONS_PER_RUN='0' must be above 0"),
        ("BACKFILL_MAX_PARTITIONS_PER_RUN", "a week", "BACKFILL_MAX_PARTITIONS_PER_RUN='a week' is not an integer"),
        ("SPARK_CONF", "[1]", "SPARK_CONF (its value not shown) is not a JSON object"),
        (
            "FILE_UMASK",
            "022",
            "FILE_UMASK='022' is not three octal digits ending in 7 (others never read the lake), such as 077 or 027",
        ),
        ("SPARK_CODEGEN", "yes", "SPARK_CODEGEN='yes' is not auto or 1 or 0"),
    ],
)
def test_a_bad_setting_is_refused_naming_the_variable_and_what_it_must_be(monkeypatch, variable, value, said):
    from resources.settings import SettingsError, settings

    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as refused:
        settings()
    assert str(refused.value) == said


def test_the_settings_are_read_typed_and_shown_to_dagster_as_a_resource(monkeypatch):
    from exact_backfills.definitions import defs
    from resources.settings import Settings, settings

    monkeypatch.setenv("RESTATEMENT_WINDOW_DAYS", "30")
    assert settings().restatement_window_days == 30 and settings().partition_start_date == D.isoformat()
    assert isinstance(defs.resources["settings"], Settings)


def test_a_write_reading_a_few_days_is_evaluated_interpreted_and_one_reading_more_is_compiled():
    from resources.settings import Codegen
    from resources.spark import INTERPRETED_UP_TO_BYTES, evaluation_for

    assert evaluation_for(0) is Codegen.INTERPRETED
    assert evaluation_for(INTERPRETED_UP_TO_BYTES) is Codegen.INTERPRETED
    assert evaluation_for(INTERPRETED_UP_TO_BYTES + 1) is Codegen.COMPILED


def test_the_command_line_says_which_setting_is_wrong_instead_of_a_traceback(monkeypatch, capsys):
    from exact_backfills.cli import main

    monkeypatch.setenv("PARTITION_END_DATE", "2020-01-01")
    assert main(["stale"]) == 2
    assert "error: PARTITION_END_DATE=2020-01-01 is before PARTITION_START_DATE=2025-01-01" in capsys.readouterr().err


def test_the_landing_contract_check_fails_in_dagster_naming_each_refused_file(tmp_path, monkeypatch):
    from dagster import AssetCheckKey, AssetKey, DagsterInstance

    from exact_backfills.automation import LANDING_CONTRACT
    from exact_backfills.definitions import defs

    monkeypatch.setenv("LAKE_ROOT", str(tmp_path))
    batch = tmp_path / "landing" / "order_items" / "ingest_date=2025-01-02"
    _write(batch / "good.parquet", CONTRACT, ROW)
    _write(batch / "narrow.parquet", {c: t for c, t in CONTRACT.items() if c != "channel"}, ROW)
    keys = {AssetCheckKey(AssetKey(a), LANDING_CONTRACT) for a in ("landing_order_items", "landing_products")}
    job = defs.resolve_job_def(PREVIEW_JOB).get_subset(asset_selection=set(), asset_check_selection=keys)
    with DagsterInstance.ephemeral() as instance:
        result = job.execute_in_process(instance=instance, raise_on_error=False)
    evaluations = {e.asset_key.to_user_string(): e for e in result.get_asset_check_evaluations()}
    assert not evaluations["landing_order_items"].passed
    assert (
        "order_items/ingest_date=2025-01-02/narrow.parquet: missing column channel"
        in evaluations["landing_order_items"].metadata["refused"].value
    )
    assert evaluations["landing_products"].passed


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


def test_the_instance_is_on_postgresql_exactly_when_its_url_is_set_and_a_users_own_config_is_left_alone(
    tmp_path, monkeypatch
):
    from exact_backfills.instance import POSTGRES_URL, WRITTEN_BY, write_config

    monkeypatch.delenv(POSTGRES_URL, raising=False)
    written = write_config(tmp_path / "home")
    assert "postgres_url" not in written.read_text() and "lake_writes" in written.read_text()
    assert "class: AtomicClaimSqliteEventLogStorage" in written.read_text()
    monkeypatch.setenv(POSTGRES_URL, "postgresql+psycopg2://dagster@127.0.0.1:55432/dagster")
    on_postgres = write_config(tmp_path / "home").read_text()
    assert "postgres_url:\n      env: DAGSTER_POSTGRES_URL" in on_postgres
    assert "class: AtomicClaimPostgresEventLogStorage" in on_postgres and "AtomicClaimSqlite" not in on_postgres
    own = tmp_path / "own"
    own.mkdir()
    (own / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    assert write_config(own).read_text() == "telemetry:\n  enabled: false\n"
    stale = tmp_path / "stale"  # the project's own copy, from another template: rewritten
    stale.mkdir()
    (stale / "dagster.yaml").write_text(WRITTEN_BY + "event_log_storage:\n  module: resources.event_log\n")
    assert "resources.event_log" not in write_config(stale).read_text()


def test_the_run_queue_launches_one_run_at_a_time_and_looks_for_a_queued_run_every_second(tmp_path, monkeypatch):
    from dagster import DagsterInstance, QueuedRunCoordinator
    from dagster._daemon.controller import create_daemon_of_type

    from exact_backfills.instance import POSTGRES_URL, write_config

    monkeypatch.delenv(POSTGRES_URL, raising=False)
    home = write_config(tmp_path / "home").parent
    with DagsterInstance.from_config(str(home)) as instance:
        assert isinstance(instance.run_coordinator, QueuedRunCoordinator)
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs == 1
        # Dagster shows the dequeue daemon's interval nowhere public: this builds the daemon as `dagster-daemon` does
        # (a private function), so the test fails if Dagster stops giving the daemon the configured interval.
        assert create_daemon_of_type("QUEUED_RUN_COORDINATOR", instance).interval_seconds == 1


def test_a_command_whose_connect_server_or_database_is_down_fails_in_seconds_naming_it(monkeypatch, capsys):
    import time

    from exact_backfills.cli import main

    spark_port, postgres_port = _closed_port(), _closed_port()
    monkeypatch.setenv("SPARK_REMOTE", f"sc://127.0.0.1:{spark_port}")
    monkeypatch.setenv("DAGSTER_POSTGRES_URL", f"postgresql+psycopg2://dagster@127.0.0.1:{postgres_port}/dagster")
    t0 = time.monotonic()
    assert main(["stale"]) == 2
    assert time.monotonic() - t0 < 10
    err = capsys.readouterr().err
    assert f"cannot reach the Spark Connect server at sc://127.0.0.1:{spark_port} (SPARK_REMOTE)" in err
    assert f"cannot reach the Dagster instance's PostgreSQL at 127.0.0.1:{postgres_port} (DAGSTER_POSTGRES_URL)" in err
    assert "Traceback" not in err


def test_a_command_on_a_lake_whose_object_store_is_down_or_has_no_keys_fails_in_seconds_naming_it(monkeypatch, capsys):
    from exact_backfills.cli import main

    port = _closed_port()
    monkeypatch.setenv("LAKE_ROOT", "s3a://lake/somewhere")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    assert main(["stale"]) == 2
    err = capsys.readouterr().err
    assert f"cannot reach the object store at http://127.0.0.1:{port} (AWS_ENDPOINT_URL)" in err
    assert "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set" in err
    assert "Traceback" not in err


def test_an_object_store_that_refuses_an_operation_is_one_line_naming_what_to_check(monkeypatch):
    from resources import storage

    port = _closed_port()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "someone")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "something")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    with pytest.raises(storage.StorageError, match=r"^object storage at http://127\.0\.0\.1:\d+ did not serve"):
        storage.read_bytes("s3a://lake/somewhere/file")


def test_a_folder_is_a_delta_table_once_its_log_holds_a_commit_or_a_checkpoint(tmp_path):
    table = tmp_path / "t"
    assert not is_delta_table(str(table))  # no folder
    log = table / "_delta_log"
    log.mkdir(parents=True)
    (log / ".00000000000000000000.json.3f2a.tmp").write_text("")  # a commit being written, not made
    (log / "_last_checkpoint").write_text("")
    assert not is_delta_table(str(table))
    (log / "00000000000000000000.json").write_text("{}")
    assert is_delta_table(str(table))
    (log / "00000000000000000000.json").unlink()  # log cleanup keeps the checkpoint of the versions before
    (log / "00000000000000000010.checkpoint.parquet").write_text("")
    assert is_delta_table(str(table))


def test_a_process_started_after_dagster_ran_in_a_process_ignoring_sigint_still_stops_on_sigterm():
    """Dagster's execution copies SIGINT's handler to SIGTERM: in a process started with SIGINT ignored (nohup, a
    background job), SIGTERM is then ignored, and so in every process it starts. The engine and the cluster's
    services start through STOPPABLE, which gives them SIGTERM back, and so does the bench's `dagster dev`, a Dagster
    process that maps its own SIGTERM likewise unless SIGINT is back at its default too. When the first assertion
    fails, Dagster no longer does this: STOPPABLE can go."""
    import subprocess
    import sys

    runs_a_job = """
from dagster import job, op

@op
def nothing():
    pass

@job
def runs_in_process():
    nothing()

assert runs_in_process.execute_in_process().success
"""
    started_after_dagster = f"""
import signal, subprocess, sys, time
from resources.engine import STOPPABLE
signal.signal(signal.SIGINT, signal.SIG_IGN)
{runs_a_job}
assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN, signal.getsignal(signal.SIGTERM)
# A Dagster process of its own (as `dagster dev` is): it maps its SIGTERM to SIGINT's handler once it has run.
dagster_child = [sys.executable, "-c", sys.argv[1]]
for name, command in (
    ("sleep", ["sleep", "30"]),
    ("stoppable sleep", [*STOPPABLE, "sleep", "30"]),
    ("stoppable dagster", [*STOPPABLE, *dagster_child]),
):
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if "dagster" in name:
        assert child.stdout.readline() == "ran\\n"  # its job has run: SIGTERM is mapped now
    else:
        time.sleep(0.2)
    child.terminate()
    try:
        child.wait(timeout=3)
        print(name, "stopped")
    except subprocess.TimeoutExpired:
        print(name, "still running")
        child.kill()
"""
    dagster_child = f"""
import time
{runs_a_job}
print("ran", flush=True)
time.sleep(30)
"""
    done = subprocess.run(
        [sys.executable, "-c", started_after_dagster, dagster_child], capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["sleep still running", "stoppable sleep stopped", "stoppable dagster stopped"]


def test_a_refusal_is_the_machinerys_own_line_and_any_other_error_its_class_and_first_line():
    from exact_backfills.backfill import said

    refusal = "dagster._core.definitions.events.Failure: plan 1a2b is promoted: plan again\n"
    assert said("Failure", refusal) == "plan 1a2b is promoted: plan again"
    error = (
        "pyspark.errors.exceptions.connect.AnalysisException: [UNRESOLVED_COLUMN] `x` cannot be resolved.\nplan...\n"
    )
    assert said("AnalysisException", error) == "AnalysisException: [UNRESOLVED_COLUMN] `x` cannot be resolved."


def test_a_plan_ends_saying_what_promoting_it_would_do_and_a_plan_with_nothing_to_rebuild_offers_nothing():
    from exact_backfills.cli import plan_outcome
    from exact_backfills.plans import BlockingFailure, Plan, TablePlan

    def plan(tables, failures=()):
        return Plan("p1", datetime(2025, 1, 1), D, D, {}, {}, tables, list(failures))

    changed = TablePlan("v1", "v2", [D], [day(1)])
    unchanged = TablePlan("v1", "v2", [], [D])
    assert (
        plan_outcome(plan({"t": changed}), "cmd", "r")
        == "nothing published changed; promote it with `cmd promote p1` (run r)"
    )
    assert "rewriting none" in plan_outcome(plan({"t": unchanged}), "cmd", "r")
    assert plan_outcome(plan({}), "cmd", "r").startswith("nothing to rebuild, nothing to promote")
    assert "promote it" not in plan_outcome(plan({}), "cmd", "r") and "`cmd promote" not in plan_outcome(
        plan({}), "cmd", "r"
    )
    failing = plan({"t": changed}, [BlockingFailure("t", "unique_key", D, "duplicate_rows=1")])
    assert (
        plan_outcome(failing, "cmd", "r") == "plan p1 cannot be promoted: blocking checks failed in its shadow tables"
    )


def test_a_stale_day_names_its_table_once_and_the_table_whose_code_changed():
    from exact_backfills.cli import describe_code_change
    from exact_backfills.dependencies import CodeChange

    assert describe_code_change("features", CodeChange("features", "a1", "b2")) == "code changed (a1 → b2)"
    assert describe_code_change("marts", CodeChange("fact", "a1", "b2")) == (
        "built from fact, whose code changed (a1 → b2)"
    )


def test_a_restatement_is_one_readable_line_in_its_runs_log():
    from exact_backfills.automation import RestatementSummary

    line = RestatementSummary(
        days_by_table={"stg": [date(2025, 1, 2), date(2025, 1, 3)], "fact": [date(2025, 1, 2)]},
        outside_window={"stg": [date(2024, 1, 1)]},
        refused_files=[],
        watermark=datetime(2025, 2, 1, 2),
    ).describe()
    assert line == (
        "restated: stg 2 day(s); fact 1 day(s); 1 day(s) older than the restatement window recorded as exceptions; "
        "watermark 2025-02-01T02:00:00"
    )
    assert "{" not in line
    nothing = RestatementSummary({}, {}, ["order_items/ingest_date=2025-01-02/a.parquet: no column day"], None)
    assert nothing.describe() == "restated: nothing to restate; 1 landed file(s) refused; watermark -"


def test_metrics_show_on_the_terminal_and_as_json_by_the_same_figures():
    from exact_backfills.cli import describe_metrics
    from exact_backfills.metrics import AssetMetrics, LandingLag, Metrics, TableLag

    landing = LandingLag("2025-01-04", date(2025, 1, 3), datetime(2025, 1, 4, 2), 86400.0, [date(2025, 1, 2)], {})
    figures = Metrics(
        landing,
        [
            AssetMetrics("fact_order_item", 3, 4.2, 1.5, 0, 2, date(2025, 1, 3), [date(2025, 1, 1), date(2025, 1, 2)]),
            AssetMetrics("stg_order_items", 1, 10.0, None, None, None, None),
        ],
    )
    assert describe_metrics(figures) == [
        "landing: newest batch 2025-01-04, newest day 2025-01-03; watermark 2025-01-04T02:00:00; landed data not yet "
        "published: 86400 s",
        "asset                       runs  p95 run s  dup per 1k  mismatches  stale days  newest day",
        "fact_order_item                3        4.2         1.5           0           2  2025-01-03"
        "  missed deadlines: 2025-01-01..2025-01-02",
        "stg_order_items                1       10.0           0           0           -  -",
    ]
    assert figures.to_json() == {
        "newest_landed_batch": "2025-01-04",
        "newest_landed_day": "2025-01-03",
        "watermark": "2025-01-04T02:00:00",
        "landing_lag_s": 86400.0,
        "held_days": ["2025-01-02"],
        "assets": [
            {
                "asset": "fact_order_item",
                "runs": 3,
                "p95_run_s": 4.2,
                "duplicate_per_1k": 1.5,
                "mismatch_count": 0,
                "stale_days": 2,
                "newest_published_day": "2025-01-03",
                "missed_deadlines": ["2025-01-01", "2025-01-02"],
            },
            {
                "asset": "stg_order_items",
                "runs": 1,
                "p95_run_s": 10.0,
                "duplicate_per_1k": None,
                "mismatch_count": None,
                "stale_days": None,
                "newest_published_day": None,
                "missed_deadlines": None,
            },
        ],
    }
    never = Metrics(LandingLag(None, None, None, None, [], {"t": TableLag()}), [])
    assert describe_metrics(never)[0] == (
        "landing: newest batch -, newest day -; watermark - (never restated); landed data not yet published: -"
    )


def test_a_commits_columns_go_on_the_materialization_dagster_records_last_only():
    """Dagster's UI shows an asset's columns from its newest materialization: of a commit's days, the last of the
    step's range when nothing else follows it, else the last of the days beyond it (recorded after the range)."""
    from exact_backfills.publish import COLUMN_SCHEMA
    from exact_backfills.recording import columns_on_the_newest

    def with_columns(days):
        return {d: {"rows_written": 1, COLUMN_SCHEMA: "the columns"} for d in days}

    def carrying(by_day):
        return [d for d, m in by_day.items() if COLUMN_SCHEMA in m]

    in_range = {day(0).isoformat(), day(1).isoformat()}
    assert carrying(columns_on_the_newest(with_columns([day(1), day(0)]), in_range)) == [day(1)]
    assert carrying(columns_on_the_newest(with_columns([day(0), day(1), day(5)]), in_range)) == [day(5)]
    assert carrying(columns_on_the_newest(with_columns([day(3), day(1)]), {day(3).isoformat()})) == [day(1)]
    assert carrying(columns_on_the_newest(with_columns([day(2), day(4)]), set())) == [day(4)]
    kept = columns_on_the_newest(with_columns([day(0), day(1)]), in_range)
    assert all(m["rows_written"] == 1 for m in kept.values()) and columns_on_the_newest({}, in_range) == {}


def test_the_live_demos_outbox_delivers_each_nights_batches_whole_and_no_later_ones(tmp_path):
    """A batch folder is moved into the landing in one rename, with its files, once its night has come."""
    from exact_backfills.live import Outbox, Plan
    from tests.support.lake import environment

    outbox = Outbox(tmp_path / "outbox")
    for source in ORDERS.sources:
        for n in (1, 2, 3):
            batch = outbox.root / "landing" / source.name / f"ingest_date={day(n)}"
            batch.mkdir(parents=True)
            (batch / "part-0.parquet").write_text(source.name)
    with environment(LAKE_ROOT=str(tmp_path / "lake")):
        delivered = outbox.deliver(ORDERS, through=day(2))
    assert delivered == [f"{s.name}/ingest_date={day(n)}" for s in ORDERS.sources for n in (1, 2)]
    for source in ORDERS.sources:
        landed = tmp_path / "lake" / "landing" / source.name
        assert sorted(p.parent.name for p in landed.glob("*/part-0.parquet")) == [
            f"ingest_date={day(n)}" for n in (1, 2)
        ]
        assert [p.name for p in (outbox.root / "landing" / source.name).iterdir()] == [f"ingest_date={day(3)}"]
    plan = Plan(first_day=day(0), first_live_day=day(3), days=3, late=2)
    assert plan.live_days == [day(3), day(4), day(5)] and [plan.is_late(d) for d in plan.live_days] == [
        False,
        True,
        False,
    ]
    assert not any(Plan(day(0), day(3), 3, late=0).is_late(d) for d in plan.live_days)
