"""The Dagster instance: the project's `dagster.yaml`, with runs, events and schedules in SQLite files in
DAGSTER_HOME or, when DAGSTER_POSTGRES_URL is set, in PostgreSQL (`dagster-postgres.yaml` appended); and, before a
command starts, that the services it needs (Spark Connect, PostgreSQL) answer, so a service that is down is named
within seconds."""

import json
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from resources.lake import REPO_ROOT
from resources.settings import SettingsError, settings
from resources.spark import remote_url, without_token
from resources.storage import on_object_store

POSTGRES_URL = "DAGSTER_POSTGRES_URL"
# The first line of an instance configuration the project wrote: it is rewritten when the template or the storage
# changes. A dagster.yaml without it is the user's own and is left alone.
WRITTEN_BY = "# Written by exact-backfills from the repository's dagster.yaml: edits here are replaced.\n"


# Runs and schedules keep Dagster's defaults; the event log is named for its class, with the home's path (rewritten by
# every entry point: setup.sh, demo.sh, the command line, so a moved home is followed).
SQLITE_EVENT_LOG = (
    "# Events in Dagster's SQLite files, where Dagster keeps them by default; "
    "slot claims atomic, one engine per file (dagster_private.py).\n"
    """event_log_storage:
  module: exact_backfills.dagster_private
  class: AtomicClaimSqliteEventLogStorage
  config:
    base_dir: {base_dir}
"""
)


def config_text(home: Path) -> str:
    text = WRITTEN_BY + (REPO_ROOT / "dagster.yaml").read_text()
    if os.environ.get(POSTGRES_URL):
        return text + (REPO_ROOT / "dagster-postgres.yaml").read_text()
    return text + SQLITE_EVENT_LOG.format(base_dir=json.dumps(str(home.resolve() / "history" / "runs")))


def write_config(home: Path | str | None = None) -> Path:
    """DAGSTER_HOME/dagster.yaml (or `home`'s), as config_text() says, unless it is the user's own."""
    home = Path(home or os.environ.setdefault("DAGSTER_HOME", str(REPO_ROOT / ".dagster_home")))
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = home / "dagster.yaml"
    text = config_text(home)
    current = path.read_text() if path.exists() else None
    if current is None or (current.startswith(WRITTEN_BY) and current != text):
        path.write_text(text)
    return path


def _answers(host: str, port: int, timeout_s: float = 3.0) -> str | None:
    """None when something listens on host:port, else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__


def unreachable_services() -> list[str]:
    """One line per configured service that does not answer: the Spark Connect server (SPARK_REMOTE), the
    instance's PostgreSQL (DAGSTER_POSTGRES_URL) and the object store of a lake on it (AWS_ENDPOINT_URL, and its
    keys)."""
    problems = []
    configured = settings()
    if on_object_store(configured.lake_root):
        missing = [k for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if not os.environ.get(k)]
        if missing:
            problems.append(
                f"LAKE_ROOT {configured.lake_root} is on object storage but {' and '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not set (for the project's own server: "
                "source .object-store/env)"
            )
        endpoint = configured.object_store_endpoint
        if endpoint:
            parsed = urlparse(endpoint)
            secure = parsed.scheme == "https"
            why = _answers(parsed.hostname or "localhost", parsed.port or (443 if secure else 80))
            if why:
                problems.append(
                    f"cannot reach the object store at {endpoint} (AWS_ENDPOINT_URL): {why}; is it running? "
                    "(bash scripts/object-store.sh status)"
                )
    remote = os.environ.get("SPARK_REMOTE")
    if remote:
        parsed = urlparse(remote.replace("sc://", "http://", 1))
        why = _answers(parsed.hostname or "localhost", parsed.port or 15002)
        if why:
            problems.append(
                f"cannot reach the Spark Connect server at {without_token(remote)} (SPARK_REMOTE): {why}; "
                "is it running? (bash scripts/spark-cluster.sh status)"
            )
        else:
            try:
                remote_url(settings())  # its token can be read
            except SettingsError as unreadable:
                problems.append(str(unreadable))
    postgres = os.environ.get(POSTGRES_URL)
    if postgres:
        parsed = urlparse(postgres)
        where = f"{parsed.hostname or 'localhost'}:{parsed.port or 5432}"
        why = _answers(parsed.hostname or "localhost", parsed.port or 5432)
        if why:
            problems.append(
                f"cannot reach the Dagster instance's PostgreSQL at {where} ({POSTGRES_URL}): {why}; "
                "is it running? (bash scripts/postgres.sh status)"
            )
    return problems
