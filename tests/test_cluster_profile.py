"""The production profile: the same commands against a real Spark cluster behind Spark Connect and a Dagster
instance on PostgreSQL, each started by its script (scripts/spark-cluster.sh, scripts/postgres.sh), and its UI behind
an authenticating proxy (scripts/ui.sh). Every command runs in a process of its own, as a user runs it; this process
reads the lake with its own local Spark to compare. The last tests are the profile's security tests: what another local
user, created by the tests, can reach of it (tests/test_security.py has the embedded profile's)."""

import base64
import json
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from datetime import date, timedelta
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from bench.harness import FEATURE_ROUNDING_FIX, project_with
from exact_backfills.automation import landing_state
from exact_backfills.checks import day_fingerprints
from exact_backfills.dagster_names import (
    CLI_BACKFILL_TAG,
    LAKE_WRITES_POOL,
    LANDING_STATE_TAG,
    RESTATE_JOB,
)
from exact_backfills.dagster_private import AtomicClaimPostgresEventLogStorage
from exact_backfills.instance import write_config
from resources.delta_io import read_days, read_table
from resources.lake import REPO_ROOT, table_path
from tests.support.attacker import ATTACKS, page_of_another_origin
from tests.support.event_storage import assert_records_as_dagsters_own
from tests.support.lake import (
    copy_landing,
    day_sha256,
    duplicate_keys,
    environment,
    from_scratch,
    own_engine_session,
    rows,
    versions,
)
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
    LANDING_ORDER_ITEMS,
    ORDERS,
    PUBLISH_ORDER,
    QUARANTINE_ORDER_ITEMS,
    STG_ORDER_ITEMS,
)
from tests.support.other_user import (
    as_other,
    assert_only_its_token_runs_a_query,
    command_lines_seen_by_other,
    everything_under,
    open_to_others,
    other_user,
    python_as_other,
    python_started_as_other,
    readable_by_other,
)
from tests.support.projects import run_commands
from tests.support.services import object_store, script, start
from tests.support.slot_claims import assert_one_holds_the_slot_and_the_other_gets_it_next

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

START, DAYS, CHUNK = date(2025, 1, 1), 30, 15
END = START + timedelta(days=DAYS - 1)
# The last order day's batch lands the day after: a restatement files its quarantined rows under that day.
LANDED_END = END + timedelta(days=1)
TABLES = [*PUBLISH_ORDER, QUARANTINE_ORDER_ITEMS]
CONNECT_PORT = os.environ.get("SPARK_CONNECT_PORT", "15002")
MASTER_PORT = os.environ.get("SPARK_MASTER_PORT", "7077")
MASTER_UI_PORT = os.environ.get("SPARK_MASTER_WEBUI_PORT", "8080")
WORKER_UI_PORT = int(os.environ.get("SPARK_WORKER_WEBUI_PORT", "8081"))
WORKERS = 2
PG_PORTS = (os.environ.get("DAGSTER_PG_PORT", "55432"), os.environ.get("DAGSTER_PG_SERVER_PORT", "55433"))
UI_PORT = os.environ.get("DAGSTER_UI_PORT", "3443")
CLUSTER_STATE = REPO_ROOT / ".cluster"
# What the UI's services write (as root, a link to their user's folder): the socket, the proxy's files, their
# temporary folder.
SERVED = CLUSTER_STATE / "ui" / "service"
SERVICE_USER = "exact-backfills"


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    """The object store, the cluster (two workers) and PostgreSQL up, each started by its script; a lake on the object
    store (a prefix of this module's own), a Dagster home and a database of this module's own."""
    store_home = tmp_path_factory.mktemp("object_store_server")
    with object_store(store_home) as store:
        reach_store = {k: v for k, v in store.items() if k != "LAKE_ROOT"} | {"OBJECT_STORE_HOME": str(store_home)}
        with environment(**reach_store, SPARK_WORKERS=str(WORKERS)):
            cluster_started = start("spark-cluster.sh")
        postgres_started = start("postgres.sh")
        database = f"test_{uuid.uuid4().hex[:12]}"
        url = script("postgres.sh", "url").stdout.strip()
        script("postgres.sh", "psql", f"CREATE DATABASE {database} OWNER dagster")
        root = tmp_path_factory.mktemp("cluster_lake")
        home = root / "dagster_home"
        env = {
            **reach_store,
            "SPARK_REMOTE": f"sc://127.0.0.1:{CONNECT_PORT}",
            "SPARK_CONNECT_TOKEN_FILE": str(CLUSTER_STATE / "token"),
            "DAGSTER_POSTGRES_URL": f"{url.rsplit('/', 1)[0]}/{database}",
            "PGPASSFILE": script("postgres.sh", "passfile").stdout.strip(),
            "DAGSTER_HOME": str(home),
            "LAKE_ROOT": f"{store['LAKE_ROOT']}-cluster-{uuid.uuid4().hex[:12]}",
        }
        try:
            # This process reads the same lake and instance with a Spark of its own (SPARK_REMOTE: the commands only).
            with environment(**{k: v for k, v in env.items() if k != "SPARK_REMOTE"}):
                write_config(home)  # the project's dagster.yaml with PostgreSQL storage, as the profile's commands do
                with DagsterInstance.get() as instance:
                    yield env, instance
        finally:
            if cluster_started:
                script("spark-cluster.sh", "stop", check=False)
            if postgres_started:
                script("postgres.sh", "stop", check=False)


@pytest.fixture(scope="module")
def spark(profile, tmp_path_factory):
    """This module's session, on a warm engine of its own, which reaches the object store."""
    with own_engine_session(tmp_path_factory.mktemp("engine")) as session:
        yield session


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
    script("postgres.sh", "psql", f"CREATE DATABASE {database} OWNER dagster")
    url = f"{script('postgres.sh', 'url').stdout.strip().rsplit('/', 1)[0]}/{database}"
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


def test_a_chunked_range_backfill_on_the_cluster_is_recorded_in_postgresql_and_publishes_every_table(spark, built):
    env, instance, output = built
    backfill_id = output.split()[1].rstrip(":")
    runs = instance.get_runs(RunsFilter(tags={CLI_BACKFILL_TAG: backfill_id}))
    assert "[2/2]" in output and len(runs) == 2, output
    assert all(r.status == DagsterRunStatus.SUCCESS for r in runs), [r.status for r in runs]
    assert all(rows(spark, t) for t in PUBLISH_ORDER)


def test_late_rows_restated_by_the_sensor_on_exactly_their_days_equal_a_local_build_and_roll_back_until_released(
    spark, built, tmp_path
):
    """The backfill's days the late batch leaves alone and the days it restates, equal to a from-scratch build on a
    local lake: one build for both (a build is a minute of this module). Then one of its days rolled back on the
    cluster: as before the restatement in every table, held, and its release publishes it again."""
    env, instance, _ = built
    items, expected = three_corrected_and_two_late_days(spark, START)
    before, before_sha = snapshot(spark), day_sha256(spark)
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
        stdout=(tmp_path / "daemon.log").open("w"),
        stderr=subprocess.STDOUT,
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
    said = (tmp_path / "daemon.log").read_text()[-4000:]
    assert finished, f"no restatement within 10 minutes; the daemon said:\n{said}"
    assert finished[0].status == DagsterRunStatus.SUCCESS, finished
    assert_rewrote_exactly(spark, before, expected)
    on_cluster = content(spark)
    local = from_scratch(spark, tmp_path, START, LANDED_END, view=content)
    assert local[1] == on_cluster[1]  # the SHA-256 of every table's every day
    assert local[0] == on_cluster[0]  # and so every row

    # One of its late days rolled back: that day of every table as before the restatement, every other day as restated
    restated, late = day_sha256(spark), START + timedelta(days=20)
    assert late in expected
    day = ["--start", str(late), "--end", str(late)]
    said = succeeded(command(env, "rollback", "--asset", FACT_ORDER_ITEM, *day, "--before-run", finished[0].run_id))
    assert "the days are held" in said, said
    assert day_sha256(spark) == {
        t: {
            **{d: sha for d, sha in days.items() if d != late},
            **{d: sha for d, sha in before_sha[t].items() if d == late},
        }
        for t, days in restated.items()
    }
    succeeded(command(env, "release", *day))
    assert day_sha256(spark) == restated  # as restated again, equal to the local build


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


def test_two_backfills_launched_at_once_on_the_cluster_lose_no_commit_and_change_nothing(spark, built):
    """Both write through the Connect server, one after the other (the lake_writes pool): each commits once per
    table, re-running built days leaves every row as it was, and no day outside the two ranges is touched."""
    env, _, _ = built
    rows_before = {t: rows(spark, t) for t in TABLES}
    before = snapshot(spark)
    ranges = [(START, START + timedelta(days=9)), (START + timedelta(days=15), START + timedelta(days=24))]
    rerun = {str(a + timedelta(days=d)) for a, b in ranges for d in range((b - a).days + 1)}
    backfills = [
        subprocess.Popen(
            [sys.executable, "-m", "assets_pkg", "backfill", "--start", str(a), "--end", str(b)],
            cwd=REPO_ROOT,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for a, b in ranges
    ]
    for backfill in backfills:
        out, err = backfill.communicate(timeout=900)
        assert backfill.returncode == 0, out + err[-3000:]
    after = snapshot(spark)
    for table, (commits, files) in before.items():
        assert after[table][0] == commits + 2, f"{table}: a commit per backfill"
        for day, old in files.items():
            new = after[table][1].get(day, set())
            assert bool(old & new) != (day in rerun), f"{table} {day}: rewritten exactly when re-run"
    assert {t: rows(spark, t) for t in TABLES} == rows_before


def test_a_code_change_planned_and_promoted_on_the_cluster_equals_a_local_build_of_the_fixed_code(
    spark, built, tmp_path
):
    env, _, _ = built
    fixed = project_with(tmp_path / "fixed", FEATURE_ROUNDING_FIX)
    days = ["--start", str(START), "--end", str(LANDED_END)]
    plan, promote = run_commands(fixed, ["plan", *days, "--json"], ["promote", "{plan_id}"], **env)
    assert plan.code == 0 and promote.code == 0, plan.out + plan.err + promote.out + promote.err
    assert json.loads(plan.out)["tables"], "the fix changes no day"
    on_cluster = day_sha256(spark)

    # The same landing, built from scratch by the fixed code in the embedded profile on a local lake.
    scratch = tmp_path / "scratch"
    copy_landing(scratch)
    local = {"LAKE_ROOT": str(scratch), "DAGSTER_HOME": str(tmp_path / "home"), "DAGSTER_POSTGRES_URL": ""}
    (backfill,) = run_commands(fixed, ["backfill", *days], **local)
    assert backfill.code == 0, backfill.out + backfill.err
    with environment(LAKE_ROOT=str(scratch)):
        assert day_sha256(spark) == on_cluster


# The profile's security: what another local user reaches of it.


@pytest.fixture(scope="module")
def ui(profile):
    """The profile's UI and daemon behind the proxy, started by their script for this module's instance."""
    env, _ = profile
    started = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "ui.sh"), "start"],
        cwd=REPO_ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        user, password = (CLUSTER_STATE / "ui-credentials").read_text().strip().split(":", 1)
        yield f"https://127.0.0.1:{UI_PORT}", (user, password)
    finally:
        subprocess.run(["bash", str(REPO_ROOT / "scripts" / "ui.sh"), "stop"], cwd=REPO_ROOT, capture_output=True)


def _request(url: str, credentials: tuple[str, str] | None = None, body: dict | None = None) -> tuple[int, str]:
    """(status, text) of a request, over TLS checked against the proxy's own certificate."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode() if body else None, method="POST" if body else "GET"
    )
    request.add_header("Content-Type", "application/json")
    if credentials:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(credentials).encode()).decode())
    context = (
        ssl.create_default_context(cafile=str(CLUSTER_STATE / "ui" / "tls.crt")) if url.startswith("https") else None
    )
    try:
        with urllib.request.urlopen(request, timeout=60, context=context) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode(errors="replace")


VERSION_QUERY = {"query": "{ version }"}


def test_the_ui_answers_nothing_without_the_operators_password_and_everything_with_it(ui):
    base, (user, password) = ui
    assert _request(f"{base}/graphql", body=VERSION_QUERY)[0] == 401
    assert _request(f"{base}/graphql", (user, "guessed"), VERSION_QUERY)[0] == 401
    assert _request(f"{base}/", None)[0] == 401
    status, text = _request(f"{base}/graphql", (user, password), VERSION_QUERY)
    assert status == 200 and json.loads(text)["data"]["version"], text
    # Past the proxy there is no way in: the webserver listens on a socket in a folder only its user enters.
    reached = python_as_other(
        f"import socket, sys\ns = socket.socket(socket.AF_UNIX)\ns.connect({str(SERVED / 'dagster.sock')!r})\n"
    )
    assert reached.returncode != 0 and "PermissionError" in reached.stderr, reached.stderr


def test_the_browser_logs_in_to_the_production_ui_with_the_operators_credentials_from_their_file(ui, built):
    from playwright.sync_api import Error as PlaywrightError

    from tests.support.browser import dagster_ui

    base, credentials = ui
    with dagster_ui(base, credentials, certificate_trusted=False) as browser:
        browser.open("/assets")
        browser.page.get_by_text(FACT_ORDER_ITEM).first.wait_for()
        # The catalog once every row's status has loaded, counts of partitions included.
        browser.page.wait_for_function(
            "() => !document.body.innerText.includes('Loading') && /\\d+ partitions/.test(document.body.innerText)"
        )
        browser.screenshot("production-ui-logged-in")
    with dagster_ui(base, None, certificate_trusted=False) as browser:
        # Without credentials the browser is refused: Chromium, asked for a password it has none for, gives up.
        with pytest.raises(PlaywrightError, match="ERR_INVALID_AUTH_CREDENTIALS"):
            browser.page.goto(base + "/assets")


def test_a_page_of_another_origin_drives_no_mutation_of_the_production_ui_and_the_ui_still_works(ui, built, tmp_path):
    from tests.support.browser import dagster_ui

    base, credentials = ui
    _, instance, _ = built
    victim = instance.get_runs(limit=1)[0].run_id
    # Whoever sends it, with the password: a query in a GET's query string is refused, in one line.
    status, said = _request(f"{base}/graphql?query={urllib.parse.quote('{ version }')}", credentials)
    assert status == 403 and said.startswith("refused: ") and said.count("\n") == 1, (status, said)
    with dagster_ui(base, credentials, certificate_trusted=False) as browser:
        frames: list = []  # what the UI's WebSockets receive
        browser.page.on("websocket", lambda socket: socket.on("framereceived", lambda frame: frames.append(frame)))
        browser.open("/runs")  # the operator logged in: the browser holds the credentials
        browser.page.get_by_text("Runs").first.wait_for()
        with page_of_another_origin(base, victim, tmp_path, location="exact_backfills") as attacker:
            browser.page.goto(attacker)
            browser.page.wait_for_function("() => window.said !== undefined", timeout=120_000)
            said = browser.page.evaluate("() => window.said")
        launched = instance.get_runs(RunsFilter(tags={"attack": list(ATTACKS)}))
        found = {
            "websocket": said["websocket"],
            "runs launched": sorted(r.tags["attack"] for r in launched),
            "run deleted": instance.get_run_by_id(victim) is None,
        }
        assert found == {"websocket": "refused", "runs launched": [], "run deleted": False}

        # The UI on its own origin: its pages, its WebSocket, and its mutations (an observation run, launched by the
        # UI's webserver and daemon, which ends in success).
        observation = browser.observe(LANDING_ORDER_ITEMS)
        deadline = time.monotonic() + 300
        finished = []
        while not finished and time.monotonic() < deadline:
            finished = [
                r
                for r in instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE]))
                if r.run_id.startswith(observation)
            ]
            time.sleep(1)
        assert finished and finished[0].status == DagsterRunStatus.SUCCESS, finished
        frames.clear()
        browser.open(f"/runs/{finished[0].run_id}")  # its events stream over the WebSocket
        browser.page.get_by_text("RUN_SUCCESS").first.wait_for()
        assert any("connection_ack" in str(frame) for frame in frames), frames[:5]


def test_another_user_runs_no_query_on_the_clusters_connect_server(profile):
    env, _ = profile
    assert_only_its_token_runs_a_query(CONNECT_PORT, Path(env["SPARK_CONNECT_TOKEN_FILE"]).read_text().strip())


def _driver_on_the_master(name: str) -> str:
    """A PySpark driver's code that starts an application named `name` on the cluster's master: the application's id
    on its output once the master registered it (running a job would wait for cores the Connect server's application
    holds)."""
    return (
        "from pyspark.sql import SparkSession\n"
        f"spark = SparkSession.builder.master('spark://127.0.0.1:{MASTER_PORT}').appName({name!r})"
        ".config('spark.driver.host', '127.0.0.1').config('spark.ui.enabled', 'false').getOrCreate()\n"
        "print('registered', spark.sparkContext.applicationId)\n"
        "spark.stop()\n"
    )


def _refusal(driver: subprocess.Popen, timeout: float = 180) -> str:
    """What a driver's log says of its first failed attempt to register with the master, up to the cause: the driver
    is stopped then (it would try twice more, 20 s apart, before giving up). Nothing if it exits without failing."""
    timer = threading.Timer(timeout, os.killpg, (driver.pid, 9))
    timer.start()
    said: list[str] = []
    try:
        assert driver.stderr is not None
        for line in driver.stderr:
            if said or "Failed to connect to master" in line:
                said.append(line)
            if said and line.startswith("Caused by:"):
                break
    finally:
        timer.cancel()
        os.killpg(driver.pid, 9)
        driver.wait()
    return "".join(said)


def test_another_user_cannot_run_an_application_on_the_master(profile):
    # The other user's driver, without the cluster's secret, and the operator's, with it from its 0600 settings file
    # (no secret on a command line), started at once.
    theirs = python_started_as_other(_driver_on_the_master("intruder"))
    mine = subprocess.run(
        [sys.executable, "-c", _driver_on_the_master("operators-check")],
        capture_output=True,
        text=True,
        timeout=240,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith(("SPARK_REMOTE", "SPARK_CONNECT"))},
            "PYSPARK_SUBMIT_ARGS": f"--properties-file {CLUSTER_STATE / 'conf' / 'spark-defaults.conf'} pyspark-shell",
        },
    )
    refused = _refusal(theirs)  # stopped, whatever the operator's says
    assert "registered app-" in mine.stdout, mine.stderr[-2000:]
    # The master refuses the other's at its first attempt: it speaks no authenticated (SASL) RPC.
    assert "Failed to connect to master" in refused and "Expected SaslMessage" in refused, refused[-1500:]
    credentials = tuple((CLUSTER_STATE / "ui-credentials").read_text().strip().split(":", 1))
    status, text = _request(f"http://127.0.0.1:{MASTER_UI_PORT}/json/", credentials)
    assert status == 200, text
    apps = json.loads(text)
    names = {a["name"] for a in apps["activeapps"] + apps["completedapps"]}
    assert "operators-check" in names and "intruder" not in names, names
    # Nor through the REST submission server: it is off.
    rest = subprocess.run(["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/6066"], capture_output=True)
    assert rest.returncode != 0


def test_the_clusters_web_uis_ask_for_the_operators_password_and_have_no_kill_links(profile):
    credentials = tuple((CLUSTER_STATE / "ui-credentials").read_text().strip().split(":", 1))
    for port in (MASTER_UI_PORT, *(WORKER_UI_PORT + i for i in range(WORKERS))):
        assert _request(f"http://127.0.0.1:{port}/")[0] == 401
        assert _request(f"http://127.0.0.1:{port}/", (credentials[0], "guessed"))[0] == 401
        status, page = _request(f"http://127.0.0.1:{port}/", credentials)
        assert status == 200 and "Spark" in page
    # The master's page lists the running Connect application, without the link that would kill it.
    page = _request(f"http://127.0.0.1:{MASTER_UI_PORT}/", credentials)[1]
    assert "exact-backfills-connect" in page and "(kill)" not in page


def test_another_user_gets_no_answer_from_postgresql_or_pgbouncer(profile):
    env, _ = profile
    psql = next(Path("/usr/lib/postgresql").glob("*/bin/psql"))
    query = ["-h", "127.0.0.1", "-d", "dagster", "-w", "-tA", "-c", "SELECT 42"]
    for port in PG_PORTS:
        for user in ("dagster", "postgres"):
            theirs = as_other(str(psql), "-p", port, "-U", user, *query)
            assert theirs.returncode != 0 and "42" not in theirs.stdout, (port, user, theirs.stdout, theirs.stderr)
            assert "password" in theirs.stderr, theirs.stderr  # asked for one, given none
        guessed = as_other("env", "PGPASSWORD=guessed", str(psql), "-p", port, "-U", "dagster", *query)
        # Refused for the password: PostgreSQL says "password authentication failed", PgBouncer "SASL authentication
        # failed" (scram-sha-256).
        assert guessed.returncode != 0 and "authentication failed" in guessed.stderr, guessed.stderr
        # The operator, with the password file the profile names: answered.
        mine = subprocess.run(
            [str(psql), "-p", port, "-U", "dagster", *query],
            env={**os.environ, "PGPASSFILE": env["PGPASSFILE"]},
            capture_output=True,
            text=True,
        )
        assert mine.stdout.strip() == "42", mine.stderr


def test_pgbouncer_serves_only_dagsters_role_which_owns_its_database_and_nothing_else(profile):
    env, _ = profile
    psql = next(Path("/usr/lib/postgresql").glob("*/bin/psql"))
    superuser = next(  # the server's superuser's password, wherever the profile keeps it
        line.split(":")[4]
        for f in (_superuser_passfile(env), Path(env["PGPASSFILE"]))
        if f.exists()
        for line in f.read_text().splitlines()
        if line.split(":")[1:4:2] == [PG_PORTS[1], "postgres"]
    )
    query = ["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-w", "-tA", "-c", "SELECT 42"]

    def as_superuser(port: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(psql), "-p", port, *query], env={**os.environ, "PGPASSWORD": superuser}, capture_output=True, text=True
        )

    pgbouncer, server = PG_PORTS
    assert as_superuser(server).stdout.strip() == "42"  # the right password: the server itself answers it
    refused = as_superuser(pgbouncer)
    assert refused.returncode != 0 and "authentication failed" in refused.stderr, refused.stdout + refused.stderr
    # What Dagster reads holds the dagster role's password alone.
    assert {line.split(":")[3] for line in Path(env["PGPASSFILE"]).read_text().splitlines()} == {"dagster"}
    role = script(
        "postgres.sh",
        "psql",
        "SELECT rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls "
        "FROM pg_roles WHERE rolname = 'dagster'",
    ).stdout.split()
    assert role == ["f|f|f|f|f"], role


def _ui_processes() -> dict[int, tuple[int, str]]:
    """The processes of the UI's services (those ui.sh started and theirs): pid -> (user id, command line)."""
    parents, found = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError):
            continue  # exited meanwhile
    ours = {int((CLUSTER_STATE / "ui" / f"{name}.pid").read_text()) for name in ("proxy", "webserver", "daemon")}
    grew = True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in ours} - ours
        ours |= more
        grew = bool(more)
    for pid in ours:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            found[pid] = (Path(f"/proc/{pid}").stat().st_uid, command)
        except OSError:
            pass
    return found


def test_the_ui_runs_as_its_service_user_with_sockets_and_access_log_no_other_user_reaches(ui):
    import pwd

    other_user()  # a second user of the machine, and root running the tests
    base, (user, password) = ui
    assert _request(f"{base}/graphql", (user, password), VERSION_QUERY)[0] == 200
    service = pwd.getpwnam(SERVICE_USER).pw_uid
    processes = _ui_processes()
    commands = " ".join(command for _, command in processes.values())
    expected = ("nginx: master", "nginx: worker", "ui_server", "exact_backfills.daemon", "api grpc")
    assert all(f in commands for f in expected)
    assert {command.split()[0] for uid, command in processes.values() if uid != service} == set()

    # The code servers' sockets, in the services' own temporary folder: no other user reaches them.
    sockets = [c.split("--socket ", 1)[1].split()[0] for _, c in processes.values() if "--socket " in c]
    assert sockets and {Path(s).parent for s in sockets} == {(SERVED / "tmp").resolve()}, sockets
    folder = (SERVED / "tmp").resolve().stat()
    assert (folder.st_uid, folder.st_mode & 0o777) == (service, 0o700)
    for path in sockets:
        reached = python_as_other(f"import socket\nsocket.socket(socket.AF_UNIX).connect({path!r})\n")
        assert reached.returncode != 0 and "PermissionError" in reached.stderr, reached.stderr

    # Who asked the proxy for what: the user's name, never the password; readable by the services' user alone.
    log = (SERVED / "access.log").resolve()
    said = log.read_text()
    assert f"{user} " in said and '"POST /graphql"' in said, said[-500:]
    credentials = base64.b64encode(f"{user}:{password}".encode()).decode()
    assert password not in said and credentials not in said
    assert (log.stat().st_uid, log.stat().st_mode & 0o777) == (service, 0o600)
    assert readable_by_other([log]) == []


def _superuser_passfile(env: dict) -> Path:
    """The password file of PostgreSQL's superuser: beside Dagster's, used by scripts/postgres.sh alone."""
    return Path(env["PGPASSFILE"]).with_name("superuser.pgpass")


def _secrets(env: dict) -> dict[str, str]:
    """Every secret of the running profile, by where it is kept."""
    found = {
        "Connect token": Path(env["SPARK_CONNECT_TOKEN_FILE"]).read_text().strip(),
        "UI password": (CLUSTER_STATE / "ui-credentials").read_text().strip().split(":", 1)[1],
    }
    for line in (CLUSTER_STATE / "conf" / "spark-defaults.conf").read_text().splitlines():
        if line.startswith("spark.authenticate.secret "):
            found["cluster secret"] = line.split(" ", 1)[1]
    for line in [*Path(env["PGPASSFILE"]).read_text().splitlines(), *_superuser_passfile(env).read_text().splitlines()]:
        found[f"PostgreSQL password of {line.split(':')[3]}"] = line.rsplit(":", 1)[1]
    found["object store key"] = env["AWS_SECRET_ACCESS_KEY"]
    assert len(found) == 6, sorted(found)
    return found


def test_no_secret_of_the_profile_is_on_a_command_line_or_in_an_environment_another_user_reads(profile, ui, built):
    env, _ = profile
    seen = command_lines_seen_by_other()
    assert all(p in seen for p in ("SparkConnectServer", "pgbouncer", "nginx", "s3proxy"))  # the processes are there
    assert [name for name, secret in _secrets(env).items() if secret in seen] == []


def test_no_file_of_the_profiles_state_or_lake_is_open_to_another_user(profile, ui, built):
    env, _ = profile
    # The lake is the object store's: its objects are files in its folder.
    paths = everything_under(CLUSTER_STATE, SERVED, REPO_ROOT / ".postgres", Path(env["OBJECT_STORE_HOME"]))
    assert all(any(p.name == name for p in paths) for name in ("pgpass", "superuser.pgpass", "access.log"))
    assert any(p.suffix == ".parquet" for p in paths)
    assert open_to_others(paths) == []
    assert readable_by_other(paths) == []
