"""The terminal shows the project's own lines: the JVM's notice of the incubator module Spark's launcher adds goes to
the local driver's log (resources/spark.py), and nothing else the JVM prints on its stderr is lost. (On the warm
engine, the default, no process of the pipeline has a JVM of its own: the engine's prints go to its folder.)"""

import os
import subprocess
import sys
import threading

import pytest

from resources.lake import REPO_ROOT
from resources.spark import INCUBATOR_NOTICE, _driver_log, _pass_on_stderr, spark_config, spark_log

NOTICE = INCUBATOR_NOTICE.decode() + " jdk.incubator.vector"


def _local_environment(lake) -> dict[str, str]:
    unset = ("SPARK_REMOTE", "SPARK_MASTER", "SPARK_CONF", "SPARK_VERBOSE")  # local mode
    env = {k: v for k, v in os.environ.items() if k not in unset}
    # A driver in this process (the warm engine's JVM logs to its own folder, and prints on no terminal).
    return {**env, "LAKE_ROOT": str(lake), "DAGSTER_HOME": str(lake / "dagster_home"), "SPARK_ENGINE": "in-process"}


def test_the_jvms_stderr_reaches_the_terminal_but_its_incubator_notice_goes_to_the_log(tmp_path, capfd):
    log = tmp_path / "spark.log"
    read, write = os.pipe()
    copier = threading.Thread(target=_pass_on_stderr, args=(read, log))
    copier.start()
    os.write(write, f"{NOTICE}\nError: Could not create the Java Virtual Machine.\n".encode())
    os.write(write, b"Traceback from a Python worker\n")
    os.close(write)
    copier.join(timeout=10)
    assert not copier.is_alive()
    err = capfd.readouterr().err
    assert err == "Error: Could not create the Java Virtual Machine.\nTraceback from a Python worker\n"
    assert log.read_text() == NOTICE + "\n"


def test_the_driver_log_is_the_one_the_local_drivers_log4j_writes(tmp_path, monkeypatch):
    from resources.settings import settings

    monkeypatch.setenv("LAKE_ROOT", str(tmp_path))
    monkeypatch.setenv("SPARK_ENGINE", "in-process")
    for name in ("SPARK_REMOTE", "SPARK_MASTER", "SPARK_CONF"):
        monkeypatch.delenv(name, raising=False)
    assert _driver_log(spark_config()) == spark_log(settings())
    assert _driver_log(spark_config(short_runs=True)) == spark_log(settings())
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:15002")  # no local driver: no JVM of this process to quiet
    assert _driver_log(spark_config()) is None
    monkeypatch.delenv("SPARK_REMOTE")
    monkeypatch.setenv("SPARK_ENGINE", "warm")  # the warm engine's JVM is not this process's either
    assert _driver_log(spark_config()) is None


def test_every_step_takes_its_session_through_session_of():
    """A step reading the resource's session directly would start its JVM with the notice on the terminal."""
    import ast

    for path in [*(REPO_ROOT / "exact_backfills").glob("*.py"), *(REPO_ROOT / "assets_pkg").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "spark_session":
                raise AssertionError(f"{path.name}:{node.lineno}: use resources.spark.session_of(resource)")


@pytest.mark.slow  # starts a JVM
def test_starting_spark_prints_nothing_on_the_terminal(tmp_path):
    lake = tmp_path / "lake"
    code = "from resources.spark import get_spark; get_spark().range(1).count()"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=_local_environment(lake),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert INCUBATOR_NOTICE.decode() not in done.stderr, done.stderr
    assert INCUBATOR_NOTICE.decode() in (lake / "logs" / "spark.log").read_text()
