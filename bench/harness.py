"""What the bench drives, as a user would: the embedded UI as `scripts/demo.sh` serves it (the webserver, answering its
own pages only, and the daemon: exact_backfills/ui_server.py) through the same GraphQL calls the UI makes, the Dagster
instance it records in, a late batch landed on top of a built lake, and a copy of the project whose code differs (a
fixed transform).

Imported by bench/run.py once the lake, the instance and the partitions are set in the environment (assets_pkg reads
its settings when imported)."""

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import NamedTuple

from dagster import DagsterInstance
from pyspark.sql import functions as F
from pyspark.sql import types as T

from assets_pkg.pipeline import pipeline
from assets_pkg.sources import ORDER_ITEMS
from exact_backfills import landing, live
from exact_backfills.declare import Source
from exact_backfills.instance import write_config
from resources.delta_io import read_days
from resources.engine import STOPPABLE
from resources.lake import REPO_ROOT

# The embedded UI, driven through GraphQL.

LAUNCH_BACKFILL = """
mutation($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on UnauthorizedError { message }
  }
}"""

BACKFILL = """
query($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill {
      status
      runs(limit: 1000) { runId status assetSelection { path } tags { key value } }
    }
    ... on PythonError { message }
  }
}"""


RUNS = """
query($filter: RunsFilter) {
  runsOrError(filter: $filter) {
    __typename
    ... on Runs { results { runId status tags { key value } } }
    ... on PythonError { message }
  }
}"""


# What the UI and its daemon print, in the instance's folder.
UI_LOG = "ui.log"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def instance_at(dagster_home: Path):
    """The Dagster instance in `dagster_home` (configured by the project's dagster.yaml), for work done in this
    process that the webserver and daemon must see."""
    write_config(dagster_home)
    previous = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = str(dagster_home)  # the storage paths in dagster.yaml come from it
    try:
        with DagsterInstance.get() as instance:
            yield instance
    finally:
        if previous is None:
            os.environ.pop("DAGSTER_HOME")
        else:
            os.environ["DAGSTER_HOME"] = previous


class DagsterDev:
    def __init__(self, dagster_home: Path, env: dict[str, str], workspace: Path = REPO_ROOT / "workspace.yaml"):
        write_config(dagster_home)
        self.home = dagster_home
        self.port = _free_port()
        self.log = open(dagster_home / UI_LOG, "w")
        self.proc = subprocess.Popen(
            # As scripts/demo.sh serves it: from the instance's folder; able to stop on SIGTERM (STOPPABLE).
            [
                *STOPPABLE,
                sys.executable,
                "-m",
                "exact_backfills.ui_server",
                "--listen",
                f"127.0.0.1:{self.port}",
                str(workspace),
            ],
            cwd=dagster_home,
            env={**os.environ, **env, "DAGSTER_HOME": str(dagster_home)},
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def credentials(self) -> tuple[str, str]:
        """The UI's user and password, which it makes at its first start (exact_backfills/ui_server.py)."""
        from exact_backfills.ui_server import CREDENTIALS_FILE

        user, password = (self.home / CREDENTIALS_FILE).read_text().strip().split(":", 1)
        return user, password

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        user, password = self.credentials
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/graphql",
            data=json.dumps({"query": query, "variables": variables or {}}).encode(),
            headers={
                "Content-Type": "application/json",
                "Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode(),
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                body = json.load(response)
        except urllib.error.HTTPError as refused:  # with what the webserver said and the UI's log: a failure to read
            said = refused.read().decode(errors="replace")[-2000:]
            self.log.flush()
            logged = (self.home / UI_LOG).read_text(errors="replace")[-3000:]
            why = f"{refused.reason}: {said}\n--- {UI_LOG} ends with:\n{logged}"
            raise urllib.error.HTTPError(refused.url, refused.code, why, refused.headers, None) from None
        assert "errors" not in body, body["errors"]
        return body["data"]

    def wait_until_up(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the UI exited; see {UI_LOG}"
            try:
                locations = self.graphql("{ workspaceOrError { ... on Workspace { locationEntries { loadStatus } } } }")
                entries = locations["workspaceOrError"]["locationEntries"]
                if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                    return
            except OSError:
                pass
            time.sleep(1)
        raise TimeoutError("the UI did not load the code location in time")

    def launch_backfill(self, assets: list[str], partitions: list[str]) -> str:
        """What the UI's 'Launch backfill' dialog sends for a partition selection of assets."""
        params = {
            "assetSelection": [{"path": [a]} for a in assets],
            "partitionNames": partitions,
            "fromFailure": False,
            "tags": [],
        }
        result = self.graphql(LAUNCH_BACKFILL, {"params": params})["launchPartitionBackfill"]
        assert result["__typename"] == "LaunchBackfillSuccess", result
        return result["backfillId"]

    def wait_for_backfill(self, backfill_id: str, timeout: float = 600) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            backfill = self.graphql(BACKFILL, {"id": backfill_id})["partitionBackfillOrError"]
            if backfill["status"] not in ("REQUESTED", "CANCELING", "FAILING"):
                return backfill
            time.sleep(2)
        raise TimeoutError(f"backfill {backfill_id} still running after {timeout}s")

    def runs(self, job: str | None = None) -> list[dict]:
        """Runs of `job` (of every job when None), newest first."""
        run_filter = {"pipelineName": job} if job else {}
        return self.graphql(RUNS, {"filter": run_filter})["runsOrError"]["results"]

    def wait_for_run(
        self, job: str | None, tag: tuple[str, str] | None = None, run_id: str = "", timeout: float = 600
    ) -> dict:
        """The first run of `job` carrying `tag` (and whose id starts with `run_id`), once it has finished (a sensor
        or the UI launched it: we only wait)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for run in self.runs(job):
                tagged = tag is None or {"key": tag[0], "value": tag[1]} in run["tags"]
                if tagged and run["runId"].startswith(run_id) and run["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
                    return run
            time.sleep(2)
        raise TimeoutError(f"no finished run of {job} tagged {tag} after {timeout}s")

    def wait_until_idle(self, timeout: float = 3600) -> None:
        """Until no run is queued or under way: one a sensor requested meanwhile has finished."""
        busy = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(run["status"] in busy for run in self.runs()):
                return
            time.sleep(2)
        raise TimeoutError(f"runs still queued or under way after {timeout}s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


# Days on a simulated clock, which the UI's daemon, its schedules and sensors follow (exact_backfills/clock.py).


class SimulatedDays(live.SimulatedDays):
    """The live demo's driver of simulated days, on the bench's UI: started once it answers (or failing as soon as it
    exits, with its log)."""

    def __init__(self, dev: DagsterDev, instance: DagsterInstance):
        super().__init__(dev, instance)
        self.dev = dev

    def start(self, timeout: float = 300) -> None:
        self.dev.wait_until_up(timeout=timeout)
        super().start(timeout)


# A late batch, landed on top of a built lake.

# Where landed order items first reach the lake: a correction re-sends some of its rows.
STAGING = pipeline.staging[ORDER_ITEMS.name]


def next_batch_day(source: Source = ORDER_ITEMS) -> date:
    """The day after the newest landed batch of `source` (order items by default)."""
    newest = max(landing.batch_name(p) for p in landing.batch_dirs(source))
    return date.fromisoformat(newest) + timedelta(days=1)


def land_batch(
    spark, items, batch: date, source: Source = ORDER_ITEMS, ingested: datetime | None = None, also=None
) -> datetime:
    """Land `items` (rows of the landing contract, ingested_at left None) and the DataFrame `also` (rows of the
    contract with ingest_date), as the batch of `batch` loaded at `ingested` (02:00 UTC that day by default); returns
    its ingested_at."""
    ingested = ingested or datetime.combine(batch, datetime.min.time(), tzinfo=UTC) + timedelta(hours=2)
    df = spark.createDataFrame(
        [(*r[:-1], ingested, batch) for r in items],
        T.StructType([*source.schema.fields, T.StructField("ingest_date", T.DateType())]),
    )
    landing.land({source: df if also is None else also.unionByName(df)})
    return ingested


def a_day_like(spark, template: date, day: date, ingested: datetime):
    """The order items staged on `template`, as new orders of `day` loaded at `ingested`: the same items under new
    order ids (the template's plus `day`'s ordinal times 10^8, above any TPC-H order key up to SF16), with
    ingest_date: a day of business like an earlier one."""
    staged = read_days(spark, STAGING.name, STAGING.day_column, [template])
    loaded = F.lit(ingested).cast("timestamp")
    new = {
        "order_id": F.col("order_id") + day.toordinal() * 10**8,
        "order_date": F.lit(day),
        "updated_at": loaded,
        "ingested_at": loaded,
    }
    contract = [new.get(f.name, F.col(f.name)).cast(f.dataType).alias(f.name) for f in ORDER_ITEMS.schema.fields]
    return staged.select(*contract, F.lit(day).alias("ingest_date"))


def corrections(spark, day, n):
    """`n` staged items of `day`, re-sent with one more unit and a later updated_at: a correction."""
    out = []
    staged = read_days(spark, STAGING.name, STAGING.day_column, [day]).orderBy("order_id", "order_item_id").limit(n)
    for r in staged.collect():
        quantity = r.quantity + 1
        gross = (r.gross_amount / r.quantity * quantity).quantize(Decimal("0.01"))
        out.append(
            (
                r.order_id,
                r.order_item_id,
                r.order_date,
                r.customer_id,
                r.product_id,
                r.channel,
                quantity,
                gross,
                r.discount_amount,
                r.cost_amount,
                r.updated_at + timedelta(days=30),
                None,
            )
        )
    return out


# A copy of the project whose code differs: how a fixed transform is made for real (its modules are imported from the
# copy, not from the repository).

TRANSFORMS = "assets_pkg/transforms.py"


class Edit(NamedTuple):
    """A change to one line of the project's code: `old` replaced by `new` in `module`."""

    module: str
    old: str
    new: str


# A fix to the rounding of a feature: a new code version of customer_daily_features alone.
FEATURE_ROUNDING_FIX = Edit(
    TRANSFORMS, 'F.round(F.sum("discount_amount") / gross, 4)', 'F.round(F.sum("discount_amount") / gross, 2)'
)
# A rewrite of the fact's net amount that computes the same values: a new code version of the fact, no row changed.
FACT_NET_REWRITTEN = Edit(
    TRANSFORMS,
    '(F.col("gross_amount") - F.col("discount_amount")).cast(MONEY)',
    '(-(F.col("discount_amount") - F.col("gross_amount"))).cast(MONEY)',
)


def project_with(copy: Path, edit: Edit, base: Path = REPO_ROOT) -> Path:
    """A copy at `copy` of the project at `base` (the repository's by default) with `edit` made."""
    return edited(project_copy(copy, base), edit)


def project_copy(copy: Path, base: Path = REPO_ROOT) -> Path:
    """A copy at `copy` of the project at `base`: its packages, its instance's configuration and its workspace."""
    for package in ("exact_backfills", "assets_pkg", "examples", "resources"):
        shutil.copytree(base / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dagster.yaml", "dagster-postgres.yaml", "workspace.yaml", "pyproject.toml"):  # the instance's
        shutil.copy(base / name, copy / name)
    return copy


def edited(project: Path, edit: Edit) -> Path:
    """`project` with `edit` made in place: a code change deployed where its code is served from."""
    path = project / edit.module
    text = path.read_text()
    assert text.count(edit.old) == 1, f"{edit.old!r} is not in {edit.module} exactly once"
    path.write_text(text.replace(edit.old, edit.new))
    return project
