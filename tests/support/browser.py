"""The Dagster UI as a person sees it: Debian's Chromium driven by Playwright against a real `dagster dev`.

Every helper reads what is on the screen (the counts beside a Partitions bar, a backfill's status, a day's result),
not the GraphQL behind it. Screenshots go to $UI_SCREENSHOTS (default .artifacts/ui, git-ignored); the README's are
copies of them."""

import os
import re
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

from resources.lake import REPO_ROOT

SCREENSHOTS = Path(os.environ.get("UI_SCREENSHOTS", REPO_ROOT / ".artifacts" / "ui"))
# The labels beside a Partitions bar, longest first so that "Execution Failed" is not read as "Failed".
_COUNT = re.compile(
    r"(Execution Failed|Materializing|Materialized|In Progress|Failed|Missing|Skipped|Passed)\s*\((\d+)\)"
)


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        raise RuntimeError(
            "the browser tests need Debian's chromium: apt-get install chromium (scripts/setup.sh does as root)"
        )
    return path


@contextmanager
def dagster_ui(base_url: str, credentials: tuple[str, str] | None = None, certificate_trusted: bool = True):
    """The UI at `base_url`; behind the production profile's proxy, logged in with `credentials` (user, password), its
    self-signed certificate accepted with `certificate_trusted=False` (the test checks it separately)."""
    with sync_playwright() as playwright:
        # No GPU here: without --disable-gpu Chromium composites through a software GL, which cost twice the CPU of
        # an idle Dagster page.
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(
                viewport={"width": 1400, "height": 950},
                http_credentials={"username": credentials[0], "password": credentials[1]} if credentials else None,
                ignore_https_errors=not certificate_trusted,
            )
            page.set_default_timeout(60_000)
            yield DagsterUI(page, base_url)
        finally:
            browser.close()


def counts(text: str) -> dict[str, int]:
    return {label: int(n) for label, n in _COUNT.findall(text)}


class DagsterUI:
    def __init__(self, page: Page, base_url: str):
        self.page, self.base_url = page, base_url

    def open(self, path: str) -> None:
        self.page.goto(self.base_url + path)

    def leave(self) -> None:
        """A blank page: nothing polls or renders until the next `open`."""
        self.page.goto("about:blank")

    def screenshot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=path)
        return path

    def _wait_for_counts(self, expected: dict[str, int], timeout: float) -> dict[str, int]:
        """The counts beside the Partitions bar once they equal `expected` (they load, then refresh), or the last
        counts read when `timeout` passes, for the caller's assertion to show."""
        deadline = time.monotonic() + timeout
        seen: dict[str, int] = {}
        while time.monotonic() < deadline:
            seen = counts(self.page.locator("body").inner_text())
            if all(seen.get(label) == n for label, n in expected.items()):
                return seen
            self.page.wait_for_timeout(500)
        return seen

    def launch_backfill(
        self, group: str, first_day: str, last_day: str, location: str = "orders", shot: str = "launch-backfill"
    ) -> tuple[str, str]:
        """What a person does: the group's "Materialize all", a custom partition range, "Launch backfill". Returns
        the backfill's id and what the dialog said. (A group's page is its code location's: with two locations, the
        global view's "Materialize all" would select both pipelines' assets.)"""
        self.open(f"/locations/__repository__@{location}/asset-groups/{group}")
        self.page.get_by_role("button", name="Materialize all").click()
        partitions = self.page.get_by_placeholder("ex: 2025-01-01")
        partitions.fill(f"[{first_day}...{last_day}]")
        partitions.press("Enter")
        dialog = self.page.get_by_role("dialog")
        try:
            dialog.get_by_text(f"{_days_between(first_day, last_day)} partitions").wait_for()
        except Exception:  # what the dialog said instead, kept beside the screenshots
            self.screenshot(f"{shot}-failed")
            (SCREENSHOTS / f"{shot}-failed.txt").write_text(self.page.locator("body").inner_text())
            raise
        self.screenshot(shot)
        said = dialog.inner_text()
        dialog.get_by_role("button", name="Launch backfill").click()
        toast = self.page.get_by_text(re.compile(r"Created backfill \w+"))
        return toast.inner_text().split()[-1], said

    def backfill_page(self, backfill_id: str, until: str, timeout: float = 900) -> str:
        """The backfill's page once its status reads `until` (it refreshes itself); its text."""
        self.open(f"/runs/b/{backfill_id}")
        status = self.page.get_by_text("Status", exact=True).locator("xpath=following-sibling::*[1]")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if status.count() and status.first.inner_text().strip() == until:
                break
            self.page.wait_for_timeout(2000)
        return self.page.locator("body").inner_text()

    def asset_partitions(self, asset: str, expected: dict[str, int], timeout: float = 60) -> dict[str, int]:
        """The counts of the asset's Partitions view (Materialized, Failed, Missing...)."""
        self.open(f"/assets/{asset}?view=partitions")
        return self._wait_for_counts(expected, timeout)

    def check_partitions(self, asset: str, check: str, expected: dict[str, int], timeout: float = 60) -> dict[str, int]:
        """The counts of a check's own Partitions view (Passed, Failed, Missing...): Checks, the check, Partitions."""
        self.open(f"/assets/{asset}?view=checks&checkDetail={check}")
        self.page.get_by_role("tab", name="Partitions").nth(1).click()  # the first is the asset's own tab
        return self._wait_for_counts(expected, timeout)

    def _text(self) -> str:
        """The page's text, a line per cell (a table's cells come with tabs and blank lines around them)."""
        return re.sub(r"\s*\n\s*", "\n", self.page.locator("body").inner_text())

    def _select_day(self, day: str) -> None:
        """Click `day` in a Partitions view's list, then scroll back up, where the day's panel is (clicking scrolls
        the list's day into view, the panel out of it)."""
        # The list renders only the days in view: narrow it to the day first (a check's view has a filter box; an
        # asset's, the partition selection).
        check_filter = self.page.get_by_placeholder("Filter by partition")
        if check_filter.count():
            check_filter.fill(day)
        else:
            selection = self.page.get_by_placeholder("ex: 2025-01-01")
            selection.fill(day)
            selection.press("Enter")
        self.page.get_by_text(day, exact=True).filter(visible=True).last.click()
        self.page.evaluate(
            "() => { for (const e of document.querySelectorAll('*')) if (e.scrollTop) e.scrollTop = 0; }"
        )

    def check_overview(self, asset: str, check: str) -> str:
        """The check's own Overview: what it is (blocking or not), its description and latest result."""
        self.open(f"/assets/{asset}?view=checks&checkDetail={check}")
        self.page.get_by_text(re.compile(r"This is a (non-)?blocking asset check")).first.wait_for()
        return self.page.locator("body").inner_text()

    def asset_day(self, asset: str, day: str) -> str:
        """On the asset's Partitions view, the panel of `day`: its latest materialization and that one's metadata."""
        self.open(f"/assets/{asset}?view=partitions")
        self._select_day(day)
        self.page.get_by_text("rows_written").first.wait_for()
        text = self._text()
        return text[text.rindex(day) :]

    def day_result(self, day: str) -> tuple[str, str]:
        """On a check's Partitions view: the status shown for `day` (Passed, Failed...) and the result's panel
        (its run, description and metadata)."""
        self._select_day(day)
        self.page.get_by_text("Latest execution").first.wait_for()
        deadline = time.monotonic() + 30
        while True:  # the panel loads its execution after the list: a result still loading shows as Running
            self.page.wait_for_timeout(500)
            text = self._text()
            panel = text[text.rindex("Latest execution") :]
            status = text[: text.rindex("Latest execution")].rstrip().splitlines()[-1]
            if status != "Running" or time.monotonic() > deadline:
                return status, panel

    def columns(self, asset: str) -> str:
        """The asset's overview from its Columns section on: Dagster's column schema of the asset, the latest
        materialization's where it has one."""
        self.open(f"/assets/{asset}")
        self.page.get_by_text("Columns", exact=True).first.wait_for()
        self.page.wait_for_timeout(1000)
        text = self._text()
        return text[text.index("Columns") :]

    def run_markdown(self, run_id: str, label: str) -> str:
        """On a run's page, the Markdown metadata entry `label` of its step's output, as its dialog shows it."""
        self.open(f"/runs/{run_id}")
        row = self.page.locator("tr", has=self.page.get_by_text(label, exact=True)).filter(has_text="[Show Markdown]")
        row.first.get_by_text("[Show Markdown]").click()
        dialog = self.page.get_by_role("dialog")
        dialog.wait_for()
        self.page.wait_for_timeout(500)
        return dialog.inner_text()

    def freshness(self, asset: str, timeout: float = 90) -> str:
        """What the asset's overview shows under "Freshness policy" once Dagster's freshness daemon has evaluated it
        (about every 30 s): Passing, Warning or Failed; or the last line read there when `timeout` passes."""
        deadline = time.monotonic() + timeout
        while True:
            self.open(f"/assets/{asset}")
            self.page.get_by_text("Freshness policy").first.wait_for()
            self.page.wait_for_timeout(1000)
            lines = self._text().splitlines()
            status = lines[lines.index("Freshness policy") + 1]
            if status in ("Passing", "Warning", "Failed") or time.monotonic() > deadline:
                return status
            self.page.wait_for_timeout(5000)

    def observe(self, asset: str) -> str:
        """The source asset's "Observe" button: Dagster launches an observation run; the start of its id."""
        self.open(f"/assets/{asset}")
        self.page.get_by_role("button", name="Observe").click()
        toast = self.page.get_by_text(re.compile(r"Launched run \w+"))
        return toast.inner_text().split()[-1]

    def resource(self, name: str, location: str = "orders") -> str:
        """The resource's page: its configuration, each field with its value and description."""
        self.open(f"/locations/{location}/resources/{name}")
        self.page.get_by_text("Configuration").first.wait_for()
        self.page.wait_for_timeout(500)
        return self._text()

    def set_sensor(self, sensor: str, running: bool, location: str = "orders") -> None:
        """The "Running" switch on the sensor's page."""
        self.open(f"/locations/{location}/sensors/{sensor}")
        switch = self.page.get_by_role("checkbox").first
        switch.wait_for(state="attached")
        if switch.is_checked() != running:
            switch.locator("xpath=ancestor::label[1]").click()
        self.page.wait_for_function(
            "([running]) => document.querySelector('input[type=checkbox]').checked === running", arg=[running]
        )


def _days_between(first_day: str, last_day: str) -> int:
    from datetime import date

    return (date.fromisoformat(last_day) - date.fromisoformat(first_day)).days + 1
