"""The warm engine (resources/engine.py): the first process that needs Spark starts it, every later one connects to
it instead of starting a JVM of its own, processes starting at once share one, and a process asking for other
settings is refused rather than given an engine that is not what it asked for. The engines these tests start are
in folders of their own, stopped at the end; what any engine does for a process (interpreted expressions, a process
exiting while it holds a checkpoint) is shown on the test session's own, already warm: a cold engine is a minute of
CPU compiling Spark's code before it answers a query at full speed."""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from resources import engine
from resources.lake import REPO_ROOT
from resources.settings import settings

pytestmark = pytest.mark.slow  # starts engines: a JVM each

# A process that needs Spark: says which engine it used and whether it has a JVM of its own.
_USES_SPARK = """
import json
from pyspark import SparkContext
from resources.spark import get_spark
spark = get_spark()
assert spark.range(3).count() == 3
print(json.dumps({"own_jvm": SparkContext._gateway is not None}))
"""


def _process(home, code: str = _USES_SPARK, **env: str) -> subprocess.CompletedProcess:
    unset = ("SPARK_REMOTE", "SPARK_MASTER", "SPARK_CONF", "SPARK_ENGINE")
    base = {k: v for k, v in os.environ.items() if k not in unset}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env={**base, "SPARK_ENGINE_HOME": str(home), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def home(tmp_path):
    folder = tmp_path / "engine"
    yield folder
    engine.stop(folder)


@pytest.fixture(scope="module")
def started_home(tmp_path_factory):
    """A folder whose engine the first process started and later ones reuse (the refused settings' test, run after)."""
    folder = tmp_path_factory.mktemp("started") / "engine"
    yield folder
    engine.stop(folder)


@pytest.fixture
def session_engine():
    """The test session's engine (scripts/test.sh's SPARK_ENGINE_HOME), left running after this module: the first
    process that needs it starts it, as for any other module."""
    return settings().spark_engine_home


def test_the_first_process_that_needs_spark_starts_the_engine_and_the_next_connects_to_it(started_home):
    home = started_home
    assert engine.running(home) is None

    first = _process(home)
    assert first.returncode == 0, first.stderr
    started = engine.running(home)
    assert started is not None and '"own_jvm": false' in first.stdout

    second = _process(home)
    assert second.returncode == 0, second.stderr
    assert engine.running(home) == started  # the same server, still up: no JVM started for the second process
    assert '"own_jvm": false' in second.stdout
    assert (home / engine.LOG_FILE).exists()  # the engine's Spark log, in its folder


def test_processes_that_need_spark_at_once_share_one_engine(home):
    with ThreadPoolExecutor(3) as pool:
        done = list(pool.map(lambda _: _process(home), range(3)))
    assert [d.returncode for d in done] == [0, 0, 0], [d.stderr[-2000:] for d in done]
    assert engine.running(home) is not None
    servers = subprocess.run(
        ["pgrep", "-f", "--", f"--properties-file {home / engine.CONF_FILE}"], capture_output=True, text=True
    )
    assert len(servers.stdout.split()) == 1, servers.stdout  # one server JVM for the three


def test_a_process_asking_for_other_settings_is_refused_naming_them_and_runs_once_the_engine_is_stopped(
    started_home,
):
    home = started_home
    assert _process(home).returncode == 0  # the engine the first test started, or one it starts
    started = engine.running(home)

    other = _process(home, SPARK_DRIVER_MEMORY="3g")
    assert other.returncode != 0
    assert "runs with other settings" in other.stderr and "driver_memory: it runs with '4g'" in other.stderr
    assert "asks for '3g'" in other.stderr and "python -m exact_backfills engine stop" in other.stderr
    assert engine.running(home) == started  # left as it was, for the processes using it

    stopped = engine.stop(home)
    assert stopped == started and engine.running(home) is None
    assert _process(home, SPARK_DRIVER_MEMORY="3g").returncode == 0
    assert engine.running(home).settings["driver_memory"] == "3g"


def test_in_process_mode_starts_a_driver_of_its_own_and_no_engine(home):
    done = _process(home, SPARK_ENGINE="in-process")
    assert done.returncode == 0, done.stderr
    assert '"own_jvm": true' in done.stdout and engine.running(home) is None


# A process that fingerprints a few days' rows as the checks do, and says whether Spark planned compiled stages.
_FINGERPRINTS = """
import io, json, re
from contextlib import redirect_stdout
from datetime import date
from pyspark.sql import functions as F
from exact_backfills.checks import day_fingerprints
from resources.spark import get_spark
spark = get_spark()
rows = spark.range(300).select(
    F.date_add(F.lit(date(2025, 1, 1)), (F.col("id") % 3).cast("int")).alias("order_date"),
    F.col("id").alias("order_id"),
    (F.col("id") * 7 % 11).cast("decimal(12,2)").alias("amount"),
    F.when(F.col("id") % 5 == 0, None).otherwise(F.concat(F.lit("c"), F.col("id").cast("string"))).alias("customer"),
)
fingerprints = day_fingerprints(rows, "order_date")
plan = io.StringIO()
spark.conf.set("spark.sql.adaptive.enabled", "false")  # the plan as it runs, not adaptive execution's initial one
with redirect_stdout(plan):
    fingerprints.explain(mode="codegen")
spark.conf.unset("spark.sql.adaptive.enabled")
print(json.dumps({
    "compiled_stages": int(re.search(r"Found (\\d+) WholeStageCodegen subtrees", plan.getvalue()).group(1)),
    "expressions": spark.conf.get("spark.sql.codegen.factoryMode"),
    "days": sorted([str(r.day), r.rows, r.fingerprint] for r in fingerprints.collect()),
}))
"""


def test_with_spark_codegen_off_expressions_run_interpreted_and_the_fingerprints_are_the_same(session_engine):
    """SPARK_CODEGEN=0 (the tests' small lakes) changes how Spark evaluates, never what: the same days' fingerprints."""
    found = {}
    for codegen in ("1", "0"):
        done = _process(session_engine, _FINGERPRINTS, SPARK_CODEGEN=codegen)
        assert done.returncode == 0, done.stderr[-3000:]
        found[codegen] = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["1"]["compiled_stages"] > 0 and found["1"]["expressions"] == "FALLBACK"
    assert found["0"]["compiled_stages"] == 0 and found["0"]["expressions"] == "NO_CODEGEN"
    assert len(found["1"]["days"]) == 3 and found["0"]["days"] == found["1"]["days"]


_HOLDS_A_CHECKPOINT = """
from resources.spark import get_spark
kept = get_spark().range(3).localCheckpoint()
print(kept.count())
"""


def test_a_process_still_holding_a_dataframe_cached_on_the_engine_exits_at_once(session_engine):
    # A failed run leaves its checkpoints referenced until its process exits: releasing them then, over the engine's
    # authenticated channel, must not wait for a thread the exiting interpreter never runs.
    done = _process(session_engine, _HOLDS_A_CHECKPOINT)  # a process that hangs fails this on its timeout
    assert done.returncode == 0 and done.stdout.split() == ["3"], done.stderr[-2000:]
