"""A real `dagster dev` (webserver + daemon) for tests, driven through the same GraphQL calls the UI makes."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from dagster import DagsterInstance

from assets_pkg.instance import write_config
from resources.lake import REPO_ROOT

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
    def __init__(self, dagster_home: Path, env: dict[str, str]):
        write_config(dagster_home)
        self.port = _free_port()
        self.log = open(dagster_home / "dagster_dev.log", "w")
        dagster = str(Path(sys.executable).parent / "dagster")
        self.proc = subprocess.Popen(
            # As scripts/demo.sh serves it: from the instance's folder.
            [dagster, "dev", "-w", str(REPO_ROOT / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(self.port)],
            cwd=dagster_home,
            env={**os.environ, **env, "DAGSTER_HOME": str(dagster_home)},
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/graphql",
            data=json.dumps({"query": query, "variables": variables or {}}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            body = json.load(response)
        assert "errors" not in body, body["errors"]
        return body["data"]

    def wait_until_up(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "dagster dev exited; see dagster_dev.log"
            try:
                locations = self.graphql("{ workspaceOrError { ... on Workspace { locationEntries { loadStatus } } } }")
                entries = locations["workspaceOrError"]["locationEntries"]
                if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                    return
            except OSError:
                pass
            time.sleep(1)
        raise TimeoutError("dagster dev did not load the code location in time")

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

    def wait_for_run(self, job: str | None, tag: tuple[str, str] | None = None, run_id: str = "", timeout: float = 600) -> dict:
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

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()
