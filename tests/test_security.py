"""Safe to share a machine: another local user, created by the tests, runs nothing on the project's Spark, reads none of
its files and sees none of its secrets. The embedded profile here (the warm engine, a lake and a Dagster home built by
the command line); the production profile's services (the cluster, PostgreSQL, the UI's proxy) in
tests/test_cluster_profile.py, which starts them. The first tests need no Spark: what the project shows of a secret."""

import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from exact_backfills.location import definitions_of
from resources import engine
from resources.settings import REPO_ROOT, SettingsError, settings
from resources.spark import engine_settings, remote_url, without_token
from tests.support.lake import environment
from tests.support.orders import ORDERS
from tests.support.other_user import (
    assert_only_its_token_runs_a_query,
    command_lines_seen_by_other,
    everything_under,
    open_to_others,
    readable_by_other,
)

SECRET = "s3cr3t-object-store-key-9f8e7d"
TOKEN = "t0ken-of-the-connect-server-5a4b3c"


def test_settings_that_may_hold_a_secret_are_shown_by_the_variable_they_are_read_from(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    with environment(
        SPARK_CONF=json.dumps({"spark.hadoop.fs.s3a.secret.key": SECRET}),
        SPARK_REMOTE="sc://127.0.0.1:15002",
        SPARK_CONNECT_TOKEN_FILE=str(token_file),
    ):
        resources = definitions_of(ORDERS).resources  # built with these settings
        # What the UI's resources page shows: each resource's configuration, as Dagster holds it.
        shown = "".join(
            resources[name].get_resource_definition().config_schema.default_value_as_json_str
            for name in ("settings", "pyspark")
        )
        # A run's session still gets both, from the environment, when it starts.
        assert remote_url(settings()).endswith(f";authorization=Bearer {TOKEN}")
    assert SECRET not in shown and TOKEN not in shown
    assert "SPARK_CONF: not shown" in shown and "SPARK_REMOTE: not shown" in shown
    assert "sc://localhost:15002" not in shown and "sc://127.0.0.1:15002" in shown  # the URL, without its token


def test_a_process_whose_environment_changed_runs_its_jobs_with_the_settings_it_has_now(tmp_path):
    from resources.spark import ENGINE_HOME_KEY

    def engine_of_runs() -> str:
        return definitions_of(ORDERS).resources["pyspark"].spark_config[ENGINE_HOME_KEY]

    for home in (tmp_path / "first", tmp_path / "second"):
        with environment(SPARK_ENGINE="warm", SPARK_ENGINE_HOME=str(home)):
            assert engine_of_runs() == str(home)


def test_a_connect_url_is_shown_without_its_token():
    assert without_token(f"sc://localhost:15002/;token={TOKEN}") == "sc://localhost:15002"
    assert without_token(f"sc://localhost:15002/;authorization=Bearer {TOKEN}") == "sc://localhost:15002"
    assert without_token(f"sc://host:1/;use_ssl=true;token={TOKEN}") == "sc://host:1/;use_ssl=true"


def test_a_token_is_never_sent_to_another_host_without_tls(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    for remote, allowed in [("sc://spark.example:15002", False), ("sc://spark.example:15002/;use_ssl=true", True)]:
        with environment(SPARK_REMOTE=remote, SPARK_CONNECT_TOKEN_FILE=str(token_file)):
            if allowed:
                assert remote_url(settings()).endswith(f";authorization=Bearer {TOKEN}")
            else:
                with pytest.raises(SettingsError, match="without TLS") as refused:
                    remote_url(settings())
                assert TOKEN not in str(refused.value)


def test_the_engines_state_keeps_a_digest_of_each_setting_never_its_value(tmp_path):
    with environment(SPARK_CONF=json.dumps({"spark.hadoop.fs.s3a.secret.key": SECRET})):
        wanted = engine_settings(settings())
    kept = json.dumps(engine.recorded(wanted))
    assert SECRET not in kept
    assert "spark.hadoop.fs.s3a.secret.key" in kept  # which setting it is stays known, to name a difference


def test_a_bad_setting_holding_a_secret_is_refused_in_one_line_without_showing_it():
    with environment(SPARK_CONF=f'["{SECRET}"]'):
        done = subprocess.run(
            [sys.executable, "-m", "assets_pkg", "runs"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120
        )
    assert done.returncode != 0
    (line,) = done.stderr.strip().splitlines()  # one line: no traceback
    assert "SPARK_CONF (its value not shown) is not a JSON object" in line
    assert SECRET not in done.stdout + done.stderr


START, END = date(2025, 1, 1), date(2025, 1, 4)


@pytest.fixture(scope="module")
def built_by_a_user_with_an_open_umask(lake):
    """A lake and a Dagster home built by the command line, started the way a careless shell starts it (umask 022): what
    the project writes must be private whatever the umask it inherits."""
    root, _ = lake
    for command in (
        ["generate", "--start", str(START), "--end", str(END), "--rows-per-day", "5"],
        ["backfill", "--start", str(START), "--end", str(END)],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "assets_pkg", *command],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=900,
            umask=0o022,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return root


@pytest.mark.slow
def test_no_file_or_folder_of_the_lake_the_instance_or_the_engine_is_open_to_another_user(
    built_by_a_user_with_an_open_umask,
):
    root = built_by_a_user_with_an_open_umask
    home = Path(settings().spark_engine_home)
    paths = everything_under(root, Path(os.environ["DAGSTER_HOME"]), home)
    assert any(p.name.endswith(".parquet") for p in paths) and any(p.name == engine.TOKEN_FILE for p in paths)
    assert open_to_others(paths) == []
    assert readable_by_other(paths) == []


@pytest.mark.slow
def test_the_warm_engine_runs_no_query_for_a_client_without_its_token(built_by_a_user_with_an_open_umask):
    home = Path(settings().spark_engine_home)
    running = engine.running(home)
    assert running is not None
    # The query, as its operator runs it with the token, is answered; the other user's, without it, is not.
    assert_only_its_token_runs_a_query(running.port, engine.token(home))
    # The engine's settings and its token stay off every command line and environment the other user can read.
    seen = command_lines_seen_by_other()
    assert engine.token(home) not in seen
    assert f"--properties-file {home / engine.CONF_FILE}" in seen  # its settings are in the file, not inline


@pytest.mark.slow
def test_a_driver_started_in_process_takes_spark_conf_without_putting_it_on_its_command_line():
    # Run in a process of its own: the command lines of its descendants (its driver JVM) are searched for the secret.
    probe = """
import os
from pathlib import Path
from resources.spark import get_spark

spark = get_spark()
print("session has it:", spark.conf.get("spark.hadoop.fs.s3a.secret.key") == os.environ["SECRET"])
parents = {}
for stat in Path("/proc").glob("[0-9]*/stat"):
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except OSError:
        continue  # exited meanwhile
    parents[int(stat.parent.name)] = int(fields[1])
mine, grew = {os.getpid()}, True
while grew:
    more = {pid for pid, parent in parents.items() if parent in mine} - mine
    mine |= more
    grew = bool(more)
lines = []
for pid in mine - {os.getpid()}:
    try:
        lines.append(Path(f"/proc/{pid}/cmdline").read_bytes())
    except OSError:
        pass
print("its driver JVM found:", any(b"java" in line and b"pyspark-shell" in line for line in lines))
print("on a command line:", any(os.environ["SECRET"].encode() in line for line in lines))
"""
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "SPARK_ENGINE": "in-process",
            "SECRET": SECRET,
            "SPARK_CONF": json.dumps({"spark.hadoop.fs.s3a.secret.key": SECRET}),
        },
    )
    assert done.stdout.splitlines()[-3:] == [
        "session has it: True",
        "its driver JVM found: True",
        "on a command line: False",
    ], done.stdout + done.stderr[-2000:]


@pytest.mark.slow
def test_a_unary_request_to_the_warm_engine_starts_no_thread(spark):
    """The token travels as a header (engine.token_parameter). As gRPC call credentials, each unary request (a
    setting read, a checkpoint's release) would start a thread from within the channel's lock, in which a garbage
    collection can finalize a checkpointed DataFrame, whose release is such a request: the client deadlocks."""
    import threading

    spark.conf.get("spark.sql.session.timeZone")  # connected
    started = []
    real_start = threading.Thread.start

    def counting_start(thread):
        started.append(thread.name)
        real_start(thread)

    threading.Thread.start = counting_start  # type: ignore[method-assign]
    try:
        for _ in range(5):
            assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    finally:
        threading.Thread.start = real_start  # type: ignore[method-assign]
    assert started == []


@pytest.mark.slow
def test_a_rollback_launched_with_a_negative_version_is_refused_in_one_line_and_restores_nothing(
    spark, built_by_a_user_with_an_open_umask
):
    """What a launch from the UI (or its GraphQL) may ask: a version below 0 would read every day as "before the table
    existed" and restore it empty."""
    from dagster import DagsterInstance

    from exact_backfills.dagster_names import ROLLBACK_JOB, ROLLBACK_OP
    from tests.support.lake import versions
    from tests.support.orders import FACT_ORDER_ITEM, PUBLISH_ORDER

    before = {t: versions(spark, t) for t in PUBLISH_ORDER}
    config = {"start": str(START), "end": str(END), "table": FACT_ORDER_ITEM, "version": -1}
    with DagsterInstance.ephemeral() as instance:
        result = (
            definitions_of(ORDERS)
            .resolve_job_def(ROLLBACK_JOB)
            .execute_in_process(
                run_config={"ops": {ROLLBACK_OP: {"config": config}}}, instance=instance, raise_on_error=False
            )
        )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    said = failure.step_failure_data.user_failure_data.description
    assert said == "version -1 is not a Delta version: give 0 or above", said
    assert {t: versions(spark, t) for t in PUBLISH_ORDER} == before  # not a commit made
