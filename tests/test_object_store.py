"""A lake on object storage: LAKE_ROOT=s3a://bucket/prefix on the project's S3 server (scripts/object-store.sh,
s3proxy), which Spark reaches through Hadoop's S3A and the project's own file operations through pyarrow. Every
command runs in a process of its own, as a user runs it, once on the object store and once on a local folder, from
the same landed data: after a chunked backfill and its restatement, and a withdrawal, every day of every table has the
same SHA-256 on both. Two drivers committing to one table at once lose no commit. (The production profile's tests,
tests/test_cluster_profile.py, keep their lake on the same server: late data, a rollback and its release and a code
change are proven on object storage there, against a local build.)"""

import json
import os
import subprocess
import sys
import uuid
from datetime import date, timedelta
from pathlib import Path
from urllib.parse import unquote

import pytest

from exact_backfills.operations import NOTE_SUFFIX, WithdrawalNote
from resources import engine, storage
from resources.delta_io import history
from resources.lake import REPO_ROOT, landing_path, table_path, withdrawn_path
from tests.support import services
from tests.support.lake import day_sha256, environment, own_engine_session
from tests.support.object_store_proxy import Misbehaviour, misbehaving
from tests.support.orders import FACT_ORDER_ITEM, ORDER_ITEMS, STG_ORDER_ITEMS
from tests.support.projects import run_commands

pytestmark = pytest.mark.slow

# Days enough for two drivers' five each apart, in two backfill runs: a run's cost is mostly its fixed part.
START, END, CHUNK = date(2025, 1, 1), date(2025, 1, 15), 8
RANGE = ["--start", str(START), "--end", str(END)]


@pytest.fixture(scope="module")
def object_store(tmp_path_factory):
    """The project's S3 server, started by its script for this module: what its env file sets."""
    home = tmp_path_factory.mktemp("object_store_server")
    with services.object_store(home) as env:
        yield {**env, "OBJECT_STORE_HOME": str(home)}


@pytest.fixture(scope="module")
def lakes(object_store, tmp_path_factory):
    """Two lakes with a Dagster instance each: one on the object store (a prefix of this module's own), one on a local
    folder."""
    root = tmp_path_factory.mktemp("object_store")
    on_object_store = {
        "LAKE_ROOT": f"s3a://{object_store['LAKE_ROOT'].split('/')[2]}/tests-{uuid.uuid4().hex[:12]}",
        "DAGSTER_HOME": str(root / "home_s3"),
    }
    local = {"LAKE_ROOT": str(root / "lake"), "DAGSTER_HOME": str(root / "home_local")}
    with environment(**{k: v for k, v in object_store.items() if k != "LAKE_ROOT"}):
        with environment(SPARK_ENGINE_HOME=str(root / "engine")):  # the commands' engine: this module's own
            yield {"s3": on_object_store, "local": local}


@pytest.fixture(scope="module")
def spark(lakes):
    """This module's session, on its own engine, which reaches the object store (the test session's does not)."""
    from resources.settings import settings

    with own_engine_session(Path(settings().spark_engine_home)) as session:
        yield session


def on_both(lakes, *commands, project=REPO_ROOT) -> dict[str, list]:
    """The commands, in one process per lake (as `run_commands` runs them), each expected to succeed."""
    said = {name: run_commands(project, *commands, **env) for name, env in lakes.items()}
    for name, results in said.items():
        for command, result in zip(commands, results, strict=True):
            assert result.code == 0, f"{name}: {command} exited {result.code}\n{result.out}\n{result.err}"
    return said


def content(spark, lakes) -> dict[str, dict]:
    """Each lake's SHA-256 of every day of every table."""
    found = {}
    for name, env in lakes.items():
        with environment(LAKE_ROOT=env["LAKE_ROOT"]):
            found[name] = day_sha256(spark)
    return found


def assert_same_content(spark, lakes) -> None:
    found = content(spark, lakes)
    assert found["s3"][FACT_ORDER_ITEM], "nothing built"
    assert found["s3"] == found["local"]


@pytest.fixture(scope="module")
def built(spark, lakes):
    on_both(
        lakes,
        ["generate", *RANGE, "--rows-per-day", "8", "--bad-rate", "0.05"],
        ["backfill", *RANGE, "--max-partitions-per-run", str(CHUNK)],
        ["restate"],
    )
    return lakes


def test_a_chunked_backfill_on_object_storage_equals_the_same_on_a_local_folder(spark, built):
    assert_same_content(spark, built)
    with environment(LAKE_ROOT=built["s3"]["LAKE_ROOT"]):
        assert table_path(FACT_ORDER_ITEM).startswith("s3a://")
        assert storage.exists(storage.join(table_path(FACT_ORDER_ITEM), "_delta_log", f"{0:020d}.json"))


def test_a_withdrawal_on_object_storage_moves_the_file_with_its_note_and_publishes_as_on_a_local_folder(spark, built):
    batch = f"ingest_date={START + timedelta(days=3)}"
    for env in built.values():
        with environment(LAKE_ROOT=env["LAKE_ROOT"]):
            # The batch's file holding its first order item (file names are the writer's own, not the same on both).
            folder = storage.join(landing_path(ORDER_ITEMS.name), batch)
            first = spark.read.parquet(folder).select("order_id", "_metadata.file_path").orderBy("order_id").first()
            file = storage.stat(storage.normalized(unquote(first.file_path)))
            assert file is not None
        withdraw = ["withdraw", "--file", f"{ORDER_ITEMS.name}/{batch}/{file.name}", "--reason", "sent twice"]
        (said,) = run_commands(REPO_ROOT, withdraw, **env)
        assert said.code == 0, said.out + said.err
        with environment(LAKE_ROOT=env["LAKE_ROOT"]):
            assert not storage.exists(file.path)
            moved = storage.files_below(withdrawn_path(ORDER_ITEMS.name))
            assert sorted(f.name for f in moved) == [file.name, f"{file.name}{NOTE_SUFFIX}"]
            assert [f.size for f in moved if f.name == file.name] == [file.size]
            # Its note records the bytes moved; neither a move nor a new note goes over what is there, on the store too.
            note = WithdrawalNote.read(next(f.path for f in moved if f.name.endswith(NOTE_SUFFIX)))
            assert note.withdrawn == storage.digest(note.moved_to) and note.withdrawn.size == file.size
            other = storage.join(env["LAKE_ROOT"], "not-withdrawn", file.name)
            storage.write_bytes(other, b"other bytes")
            with pytest.raises(FileExistsError):
                storage.move(other, note.moved_to)
            with pytest.raises(FileExistsError):
                storage.create_bytes(note.path, b"{}")
            assert storage.digest(note.moved_to) == note.withdrawn and WithdrawalNote.read(note.path) == note
            assert storage.read_bytes(other) == b"other bytes"
            storage.delete_tree(storage.parent(other))
    assert_same_content(spark, built)


# Commits stay atomic on object storage even with more than one driver.

_COMMIT_DAYS = """
import sys
from datetime import date, timedelta
from resources.delta_io import read_days
from resources.lake import table_path
from resources.spark import get_spark
spark = get_spark()
first = date.fromisoformat(sys.argv[1])
for n in range(int(sys.argv[2])):
    day = first + timedelta(days=n)
    rows = read_days(spark, "stg_order_items", "order_date", [day])
    rows.write.format("delta").mode("overwrite").option("replaceWhere", f"order_date = '{day}'").save(
        table_path("stg_order_items")
    )
print("committed")
"""


def test_two_drivers_committing_to_one_table_at_once_lose_no_commit(spark, built):
    """Each with a Spark driver of its own (SPARK_ENGINE=in-process), five commits each to the same table at once:
    Delta's S3 log store alone lets the later of two same-version commits replace the earlier; the project's
    conditional PUT makes the later retry, so every commit is in the log."""
    env = {**built["s3"], "SPARK_ENGINE": "in-process"}
    with environment(LAKE_ROOT=env["LAKE_ROOT"]):
        before = len(history(spark, table_path(STG_ORDER_ITEMS)))
        rows_before = day_sha256(spark)[STG_ORDER_ITEMS]
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _COMMIT_DAYS, str(first), "5"],
            cwd=REPO_ROOT,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for first in (START, START + timedelta(days=10))
    ]
    for writer in writers:
        out, err = writer.communicate(timeout=600)
        assert writer.returncode == 0 and "committed" in out, err[-3000:]
    with environment(LAKE_ROOT=env["LAKE_ROOT"]):
        assert len(history(spark, table_path(STG_ORDER_ITEMS))) == before + 10
        assert day_sha256(spark)[STG_ORDER_ITEMS] == rows_before  # each rewrote its days with what they held


def _write_version_0_again(lakes, object_store, classes: Path, whose: str) -> tuple[list[str], bool]:
    """Version 0 of stg_order_items written again through the project's log store, as Delta calls it, in a JVM of its
    own: "own", the entry it holds (as a retried PUT of the same commit sends it), or "other", another commit of that
    version. What the call said (tests/support/PutLogEntry.java), and whether the entry is unchanged."""
    from resources.settings import settings
    from resources.spark import LOG_STORE_CLASS, object_store_config
    from tests.support import java_harness

    with environment(LAKE_ROOT=lakes["s3"]["LAKE_ROOT"]):
        entry = storage.join(table_path(STG_ORDER_ITEMS), "_delta_log", f"{0:020d}.json")
        before = storage.read_bytes(entry)
        hadoop = java_harness.hadoop_settings(object_store_config(settings()))
    lines = before.decode().splitlines() if whose == "own" else ['{"commitInfo":{}}']
    done = subprocess.run(
        java_harness.command(classes, "PutLogEntry", LOG_STORE_CLASS, entry, *lines, "--", *hadoop, object_store=True),
        env={**os.environ, **object_store},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    with environment(LAKE_ROOT=lakes["s3"]["LAKE_ROOT"]):
        return done.stdout.splitlines(), storage.read_bytes(entry) == before


@pytest.fixture(scope="module")
def put_log_entry(tmp_path_factory) -> Path:
    from tests.support import java_harness

    return java_harness.compiled("PutLogEntry", tmp_path_factory.mktemp("classes"))


def test_the_log_store_refuses_a_commit_whose_version_another_driver_wrote_on_the_servers_word_alone(
    built, object_store, put_log_entry
):
    """ConditionalPutLogStore makes no check of its own that a version exists (which another driver could pass at the
    same time): writing version 0 again is refused by the S3 server's answer to the conditional PUT. Fails loudly if
    Hadoop's S3A or the server stop honouring it."""
    said, unchanged = _write_version_0_again(built, object_store, put_log_entry, "other")
    assert said == ["refused", "holds another"] and unchanged, said


def test_a_retried_put_of_the_same_commit_is_its_own_and_accepted_without_a_second_commit(
    built, object_store, put_log_entry
):
    """A PUT whose answer was lost is retried and refused (the version exists): it holds this commit's own entry, byte
    for byte, so the commit succeeded once; reported as a conflict, Delta would commit it again at the next version."""
    said, unchanged = _write_version_0_again(built, object_store, put_log_entry, "own")
    assert said == ["committed", "holds this entry"] and unchanged, said


def test_another_user_lists_and_reads_nothing_of_the_object_store(built):
    from tests.support.other_user import as_other, everything_under, open_to_others

    endpoint = os.environ["AWS_ENDPOINT_URL"]
    with environment(LAKE_ROOT=built["s3"]["LAKE_ROOT"]):
        landed = storage.files_below(landing_path(ORDER_ITEMS.name))[0].path[len("s3a://") :]
    bucket = landed.split("/", 1)[0]
    for path in (f"{bucket}?list-type=2", landed):  # a listing, and a landed file's content
        theirs = as_other("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"{endpoint}/{path}")
        assert theirs.stdout == "403", (path, theirs.stdout, theirs.stderr)
    assert open_to_others(everything_under(Path(os.environ["OBJECT_STORE_HOME"]))) == []


# A server that does not honour conditional PUTs is refused before anything commits to it.


def test_start_up_refuses_an_object_store_that_ignores_conditional_puts_in_one_line_naming_it(object_store, tmp_path):
    """s3proxy behind a proxy that drops If-None-Match answers as a server that ignores it: a second PUT of an object
    that exists replaces it, so two drivers' commits of one version would both succeed. A command is refused before
    any Spark engine starts, in one line naming the server (AWS_ENDPOINT_URL)."""
    lake = f"s3a://{object_store['LAKE_ROOT'].split('/')[2]}/tests-{uuid.uuid4().hex[:12]}"
    engine_home = tmp_path / "engine"
    with misbehaving(object_store["AWS_ENDPOINT_URL"], Misbehaviour(ignore_conditional_puts=True)) as server:
        env = {
            **os.environ,
            **object_store,
            "AWS_ENDPOINT_URL": server,
            "LAKE_ROOT": lake,
            "DAGSTER_HOME": str(tmp_path / "dagster_home"),
            "SPARK_ENGINE_HOME": str(engine_home),
        }
        try:
            done = subprocess.run(
                [sys.executable, "-m", "assets_pkg", "generate", "--start", str(START), "--end", str(START)],
                cwd=REPO_ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
        finally:
            started = engine.stop(engine_home) if engine_home.exists() else None
    assert started is None, "an engine was started"
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: object storage at {server} does not honour conditional PUTs"), line


def test_an_object_store_honouring_conditional_puts_is_checked_once_per_process_and_keeps_no_sentinel(object_store):
    from resources.conditional_put import SENTINEL_FOLDER, ensure_honoured

    lake = f"s3a://{object_store['LAKE_ROOT'].split('/')[2]}/tests-{uuid.uuid4().hex[:12]}"
    counted = Misbehaviour()
    with misbehaving(object_store["AWS_ENDPOINT_URL"], counted) as server:
        with environment(**{**object_store, "AWS_ENDPOINT_URL": server, "LAKE_ROOT": lake}):
            ensure_honoured(lake)
            ensure_honoured(lake)  # the verdict kept: no second check
            assert storage.listing(storage.join(lake, *SENTINEL_FOLDER)) == []
    assert counted.conditional_puts == 2  # one check: its sentinel's two PUTs


def test_a_conditional_put_answered_409_is_sent_again_and_its_entry_counted_made_once(object_store, put_log_entry):
    """AWS S3 may answer 409 ConditionalRequestConflict to a conditional PUT that met another; here after the entry
    was written (the proxy forwards the PUT, then answers 409), the case where the 409 hides a commit made. The log
    store sends the PUT again, is refused with 412, reads the entry back, finds it its own: the commit is made, once,
    rather than failed."""
    from resources.settings import settings
    from resources.spark import LOG_STORE_CLASS, object_store_config
    from tests.support import java_harness

    entry = f"s3a://{object_store['LAKE_ROOT'].split('/')[2]}/tests-{uuid.uuid4().hex[:12]}/_delta_log/{0:020d}.json"
    conflicting = Misbehaviour(conflicts=1)
    with misbehaving(object_store["AWS_ENDPOINT_URL"], conflicting) as server:
        with environment(**{**object_store, "AWS_ENDPOINT_URL": server}):
            hadoop = java_harness.hadoop_settings(object_store_config(settings()))
        line = json.dumps({"commitInfo": {"userMetadata": uuid.uuid4().hex}})
        done = subprocess.run(
            java_harness.command(
                put_log_entry, "PutLogEntry", LOG_STORE_CLASS, entry, line, "--", *hadoop, object_store=True
            ),
            env={**os.environ, **object_store},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["committed", "holds this entry"], done.stdout + done.stderr[-3000:]
    assert (conflicting.conflicts_answered, conflicting.conditional_puts) == (1, 2)


def test_tables_retired_on_object_storage_are_archived_with_every_version_readable_or_dropped(spark, built):
    from exact_backfills.declare import Pipeline
    from exact_backfills.retirement import Retirement, retire
    from resources import audit
    from resources.delta_io import table_exists
    from tests.support.orders import ORDERS

    archived, dropped = "daily_category_revenue", "customer_daily_features"  # two marts no table reads
    without = Pipeline(
        ORDERS.name, ORDERS.sources, [t for t in ORDERS.tables if t.name not in (archived, dropped)], ORDERS.calendar
    )
    with environment(LAKE_ROOT=built["s3"]["LAKE_ROOT"]):
        path = table_path(archived)
        kept = [r.version for r in history(spark, path)]
        first, last = (
            sorted(spark.read.format("delta").option("versionAsOf", v).load(path).collect()) for v in (0, kept[0])
        )
        published = audit.built_by(spark, ORDERS.name)

        archiving = retire(without, archived, Retirement.ARCHIVE, published)
        dropping = retire(without, dropped, Retirement.DROP, published)

        target = archiving.split(" archived to ", 1)[1].split(",", 1)[0]
        assert target.startswith(built["s3"]["LAKE_ROOT"]) and not table_exists(archived), archiving
        # The whole log moved: every version is there, each reads as it did (relative file paths in the log).
        assert [r.version for r in history(spark, target)] == kept
        assert sorted(spark.read.format("delta").load(target).collect()) == last
        assert sorted(spark.read.format("delta").option("versionAsOf", 0).load(target).collect()) == first
        assert dropping.startswith(f"{dropped} dropped") and not table_exists(dropped)
        assert not storage.exists(table_path(dropped))
