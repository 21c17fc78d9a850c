"""The live demo (`scripts/demo.sh --live`) as a user watches it: the orders pipeline lives its days on a simulated
clock in front of its UI, two days of history, then two days, each night's batch landed, the day closed and published
by the daily run; the second night the daemon is down, and the UI shows that day late, day by day. Dagster's last
partition is the simulated today."""

import os
import signal
import socket
import subprocess
import time
from datetime import date
from pathlib import Path

import pytest

from exact_backfills.checks.deadline import PUBLISHED_BY_DEADLINE
from exact_backfills.live import LocalUi
from exact_backfills.ui_server import CREDENTIALS_FILE
from resources.lake import REPO_ROOT
from tests.support.browser import dagster_ui

pytestmark = pytest.mark.slow  # a demo with its UI and daemon through two simulated days: minutes

LIVE_DAYS = [date(2025, 1, 3), date(2025, 1, 4)]  # after the history of Jan 1 and 2; the second one late
TODAY = date(2025, 1, 5)  # the simulated today at the end: the morning after the late day's deadline
PARTITION_KEYS = """
query($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) { ... on AssetNode { partitionKeys } } }"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes_of(home: Path) -> list[str]:
    """The processes whose environment names `home` (the demo's and the UI's, the daemon's, the runs'), but the warm
    Spark engine, which outlives them when the demo started it (`engine stop` stops it)."""
    found = []
    for process in Path("/proc").iterdir():
        try:
            named = process.name.isdigit() and str(home).encode() in (process / "environ").read_bytes()
            command = (process / "cmdline").read_bytes().replace(b"\0", b" ").decode() if named else ""
        except OSError:  # ended meanwhile, or another user's
            continue
        if named and "exact-backfills-engine" not in command:
            found.append(command)
    return found


def _until(demo: subprocess.Popen, log: Path, line: str, timeout: float) -> list[str]:
    """What the demo said (into `log`) up to a line holding `line`."""
    deadline = time.monotonic() + timeout
    while True:
        said = log.read_text(errors="replace").splitlines()
        if any(line in s for s in said):
            return said
        assert demo.poll() is None, "the demo ended:\n" + "\n".join(said[-40:])
        assert time.monotonic() < deadline, "\n".join(said[-40:])
        time.sleep(1)


def test_the_live_demo_publishes_each_day_by_its_daily_run_and_shows_the_night_the_daemon_was_down_late(tmp_path):
    home, port, log = tmp_path / "live", _free_port(), tmp_path / "demo.log"
    options = ["--home", str(home), "--days", "2", "--history-days", "2", "--late-day", "2", "--rows-per-day", "10"]
    demo = subprocess.Popen(
        ["bash", "scripts/demo.sh", "--live", *options, "--port", str(port)],
        cwd=REPO_ROOT,
        env={**os.environ, "PARTITION_START_DATE": "", "PARTITION_END_DATE": "", "LATE_DATA_SENSOR_INTERVAL_S": "3"},
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        said = [line for line in _until(demo, log, "days lived", timeout=900) if line.startswith("live: ")]
        ui = LocalUi(port, home / "dagster_home" / CREDENTIALS_FILE)
        keys = ui.graphql(PARTITION_KEYS, {"key": {"path": ["fact_order_item"]}})["assetNodeOrError"]["partitionKeys"]
        user, password = (home / "dagster_home" / CREDENTIALS_FILE).read_text().strip().split(":", 1)
        with dagster_ui(f"http://127.0.0.1:{port}", (user, password)) as browser:
            ui.graphql("mutation { setNuxSeen }")  # the community sign-up dialog, shown once per instance
            materialized = browser.asset_partitions("fact_order_item", {"Materialized": 4, "Missing": 1})
            browser.screenshot("live-days-published")
            deadlines = browser.check_partitions(
                "stg_order_items", PUBLISHED_BY_DEADLINE, {"Passed": 3, "Failed": 1, "Missing": 1}
            )
            status, panel = browser.day_result(LIVE_DAYS[1].isoformat())
            browser.screenshot("live-late-day")
    finally:
        os.killpg(demo.pid, signal.SIGTERM)
        demo.wait(timeout=60)
    # Stopped, it leaves nothing of its own running: the UI, its daemon and code servers were stopped with it
    assert _processes_of(home) == []
    assert f"live: 2 days lived; published after their deadline: {LIVE_DAYS[1]}" in said, said
    assert f"live: {LIVE_DAYS[0]}: published by its daily run (success)" in said, said
    assert f"live: {LIVE_DAYS[1]}: published by its daily run (success) late: the daemon was down" in said, said
    assert keys[0] == "2025-01-01" and keys[-1] == TODAY.isoformat()
    # Every day up to yesterday published, today's in the making
    assert {label: n for label, n in materialized.items() if n} == {"Materialized": 4, "Missing": 1}, materialized
    # Each day met its deadline (the history's first: the table was built after it was due) but the late one, which
    # says how late and why: its batch landed at 01:00, nothing ran it until 07:00
    assert {label: n for label, n in deadlines.items() if n} == {"Passed": 3, "Failed": 1, "Missing": 1}, deadlines
    assert status == "Failed", status
    assert "late_by\n1 h" in panel and "its rows landed in time; its run published it late" in panel, panel
