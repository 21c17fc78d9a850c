"""The production profile: the same commands against a real Spark cluster behind Spark Connect and a Dagster
instance on PostgreSQL, each started by its script (scripts/spark-cluster.sh, scripts/postgres.sh). Every command
runs in a process of its own, as a user runs it; this process reads the lake with its own local Spark to compare."""

import os
import subprocess
import sys
import time
import uuid
from datetime import date, timedelta

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from exact_backfills.automation import landing_state
from exact_backfills.checks import day_fingerprints
from exact_backfills.dagster_names import CLI_BACKFILL_TAG, LAKE_WRITES_POOL, LANDING_STATE_TAG, RESTATE_JOB
from exact_backfills.dagster_private import AtomicClaimPostgresEventLogStorage
from exact_backfills.instance import write_config
from resources.delta_io import read_days, read_table
from resources.lake import REPO_ROOT, table_path
from tests.support.event_storage import assert_records_as_dagsters_own
from tests.support.lake import duplicate_keys, environment, from_scratch, rows, versions
from tests.support.late_batches import (
    assert_rewrote_exactly,
    land_batch,
    next_batch_day,
    snapshot,
    three_corrected_and_two_late_days,
)
from tests.support.orders import (
    DAY_COLUMN,
    FACT_ORDER_ITEM,
    ORDERS,
    PUBLISH_ORDER,
    QUARANTINE_ORDER_ITEMS,
    STG_ORDER_ITEMS,
)
from tests.support.slot_claims import assert_one_holds_the_slot_and_the_other_gets_it_next

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

START, DAYS, CHUNK = date(2025, 1, 1), 30, 10
END = START + timedelta(days=DAYS - 1)
# The last order day's batch lands the day after: a restatement files its quarantined rows under that day.
LANDED_END = END + timedelta(days=1)
TABLES = [*PUBLISH_ORDER, QUARANTINE_ORDER_ITEMS]
CONNECT_PORT = os.environ.get("SPARK_CONNECT_PORT", "15002")


def _script(name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / name), *args], cwd=REPO_ROOT, capture_output=True, text=True, check=check
    )


def _service(name: str):
    """Start a service by its script unless it runs already; stop it afterwards only if this test started it."""
    started = _script(name, "status", check=False).returncode != 0
    if started:
        done = _script(name, "start", check=False)
        assert done.returncode == 0, f"{name} start failed:\n{done.stdout}\n{done.stderr}"
    return started


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    """The cluster and PostgreSQL up; a lake, a Dagster home and a database of this module's own."""
    cluster_started = _service("spark-cluster.sh")
    postgres_started = _service("postgres.sh")
    database = f"test_{uuid.uuid4().hex[:12]}"
    url = _script("postgres.sh", "url").stdout.strip()
    _script("postgres.sh", "psql", f"CREATE DATABASE {database} OWNER dagster")
    root = tmp_path_factory.mktemp("cluster_lake")
    home = root / "dagster_home"
    env = {
        "SPARK_REMOTE": f"sc://127.0.0.1:{CONNECT_PORT}",
        "DAGSTER_POSTGRES_URL": f"{url.rsplit('/', 1)[0]}/{database}",
        "DAGSTER_HOME": str(home),
        "LAKE_ROOT": str(root),
    }
    try:
        # This process reads the same lake and instance; its own Spark stays local (SPARK_REMOTE: the commands only).
        with environment(**{k: v for k, v in env.items() if k != "SPARK_REMOTE"}):
            write_config(home)  # the project's dagster.yaml with PostgreSQL storage, as the profile's commands write it
            with DagsterInstance.get() as instance:
                yield env, instance
    finally:
        if cluster_started:
            _script("spark-cluster.sh", "stop", check=False)
        if postgres_started:
            _script("postgres.sh", "stop", check=False)


def test_of_two_processes_claiming_the_lake_writes_slot_at_once_on_postgresql_one_holds_it_the_other_waits(profile):
    _, instance = profile
    storage = instance.event_log_storage
    assert isinstance(storage, AtomicClaimPostgresEventLogStorage)
    storage.initialize_concurrency_limit_to_default(LAKE_WRITES_POOL)
    with DagsterInstance.get() as other:  # another process's storage: connections of its own
        assert_one_holds_the_slot_and_the_other_gets_it_next(storage, other.event_log_storage)


def _postgres_instance(tmp_path, storage: str):
    """An instance on a new database of the profile's PostgreSQL: the project's event log class ("project"), or
    Dagster's own PostgreSQL storage ("dagster")."""
    database = f"test_{uuid.uuid4().hex[:12]}"
    _script("postgres.sh", "psql", f"CREATE DATABASE {database} OWNER dagster")
    url = f"{_script('postgres.sh', 'url').stdout.strip().rsplit('/', 1)[0]}/{database}"
    if storage == "dagster":
        overrides: dict = {"storage": {"postgres": {"postgres_url": url}}}
    else:
        overrides = {
            part: {"module": module, "class": cls, "config": {"postgres_url": url}}
            for part, (module, cls) in {
                "run_storage": ("dagster_postgres", "PostgresRunStorage"),
                "event_log_storage": ("exact_backfills.dagster_private", "AtomicClaimPostgresEventLogStorage"),
                "schedule_storage": ("dagster_postgres", "PostgresScheduleStorage"),
            }.items()
        }
    (tmp_path / storage).mkdir()
    return DagsterInstance.local_temp(str(tmp_path / storage), overrides={**overrides, "telemetry": {"enabled": False}})


def test_the_projects_postgresql_storage_records_every_event_and_check_result_as_dagsters_own_does(
    profile, tmp_path, monkeypatch
):
    with _postgres_instance(tmp_path, "project") as ours, _postgres_instance(tmp_path, "dagster") as dagsters:
        assert isinstance(ours.event_log_storage, AtomicClaimPostgresEventLogStorage)
        assert_records_as_dagsters_own(ours, dagsters, monkeypatch)


def content(spark) -> tuple[dict, dict]:
    """Every table's rows, and the SHA-256 fingerprint of each of its days (the checks' own)."""
    fingerprints = {
        t: {
            r.day: r.fingerprint for r in day_fingerprints(read_table(spark, t).drop("run_id"), DAY_COLUMN[t]).collect()
        }
        for t in TABLES
    }
    return {t: rows(spark, t) for t in TABLES}, fingerprints


def command(env: dict, *args: str) -> subprocess.CompletedProcess:
    """`python -m assets_pkg ARGS` in the profile, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "assets_pkg", *args],
        cwd=REPO_ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=900,
    )


def succeeded(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    # The Connect client's own logging of errors the code expects (a table not written yet) stays off the terminal.
    assert "GRPC Error received" not in done.stderr, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def built(profile):
    env, instance = profile
    succeeded(
        command(env, "generate", "--start", str(START), "--end", str(END), "--rows-per-day", "8", "--bad-rate", "0.05")
    )
    output = succeeded(
        command(env, "backfill", "--start", str(START), "--end", str(END), "--max-partitions-per-run", str(CHUNK))
    )
    # The restatement that follows a backfill: it stages every batch, and the sensor has nothing left to repeat.
    succeeded(command(env, "restate"))
    return env, instance, output


def test_a_chunked_range_backfill_on_the_cluster_is_recorded_in_postgresql_and_equals_a_local_build(
    spark, built, tmp_path
):
    env, instance, output = built
    backfill_id = output.split()[1].rstrip(":")
    runs = instance.get_runs(RunsFilter(tags={CLI_BACKFILL_TAG: backfill_id}))
    assert "[3/3]" in output and len(runs) == 3, output
    assert all(r.status == DagsterRunStatus.SUCCESS for r in runs), [r.status for r in runs]
    on_cluster = content(spark)
    assert all(on_cluster[0][t] for t in PUBLISH_ORDER)
    local = from_scratch(spark, tmp_path, START, LANDED_END, view=content)
    assert local[1] == on_cluster[1]  # the SHA-256 of every table's every day
    assert local[0] == on_cluster[0]  # and so every row


def test_rerunning_a_subrange_on_the_cluster_changes_nothing_and_touches_only_its_days(spark, built):
    env, _, _ = built
    before_rows = {t: rows(spark, t) for t in TABLES}
    before = snapshot(spark)
    days = {START + timedelta(days=d) for d in (4, 5, 6)}
    succeeded(command(env, "backfill", "--start", str(min(days)), "--end", str(max(days))))
    assert_rewrote_exactly(spark, before, {t: days for t in PUBLISH_ORDER}, tables=PUBLISH_ORDER)
    assert {t: rows(spark, t) for t in TABLES} == before_rows


def test_late_rows_are_restated_by_the_sensor_on_exactly_their_days(spark, built, tmp_path):
    env, instance, _ = built
    items, expected = three_corrected_and_two_late_days(spark, START)
    before = snapshot(spark)
    land_batch(spark, items, next_batch_day())
    state = landing_state(ORDERS)
    daemon = subprocess.Popen(
        [
            str(os.path.join(os.path.dirname(sys.executable), "dagster-daemon")),
            "run",
            "-w",
            str(REPO_ROOT / "workspace.yaml"),
        ],
        cwd=env["DAGSTER_HOME"],
        env={**os.environ, **env, "LATE_DATA_SENSOR_INTERVAL_S": "5"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 600
        finished = []
        while not finished and time.monotonic() < deadline:
            assert daemon.poll() is None, "dagster-daemon exited"
            finished = [
                r
                for r in instance.get_runs(RunsFilter(job_name=RESTATE_JOB, tags={LANDING_STATE_TAG: state}))
                if r.status in (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)
            ]
            time.sleep(2)
    finally:
        os.killpg(daemon.pid, 9)
        daemon.wait()
    assert finished and finished[0].status == DagsterRunStatus.SUCCESS, finished or "no restatement within 10 minutes"
    assert_rewrote_exactly(spark, before, expected)
    assert from_scratch(spark, tmp_path, START, LANDED_END) == {t: rows(spark, t) for t in TABLES}


def test_a_blocking_failure_on_the_cluster_publishes_nothing(spark, built):
    env, _, _ = built
    day = START + timedelta(days=9)
    # A duplicate written into staging behind the pipeline's back: the fact built from it fails unique_key.
    read_days(spark, STG_ORDER_ITEMS, "order_date", [day]).limit(1).write.format("delta").mode("append").save(
        table_path(STG_ORDER_ITEMS)
    )
    before = versions(spark, FACT_ORDER_ITEM)
    fact_before = rows(spark, FACT_ORDER_ITEM)
    failed = command(env, "backfill", "--select", FACT_ORDER_ITEM, "--start", str(day), "--end", str(day))
    assert failed.returncode != 0
    assert "unique_key" in failed.stdout + failed.stderr, failed.stdout + failed.stderr
    assert versions(spark, FACT_ORDER_ITEM) == before and rows(spark, FACT_ORDER_ITEM) == fact_before
    # The documented recovery: backfill the day from the landing, which rebuilds staging too.
    succeeded(command(env, "backfill", "--start", str(day), "--end", str(day)))
    assert duplicate_keys(spark, STG_ORDER_ITEMS) == 0
