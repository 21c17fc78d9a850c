"""The write path's vocabulary: why days change (`Operation`), where each table's rows come from (`RowSource`), the
change itself (`Change`) and who makes it (`RunInfo`), what publishing it gives (`Publication`), and how it can end
short of that: refused with nothing written (`Refused`), or failed after committing some tables (`PartlyPublished`)."""

from dataclasses import dataclass, field
from datetime import date
from enum import Enum
from typing import Any

from dagster import DagsterRun

from exact_backfills import checks, code_versions
from exact_backfills.builds import LandedBatches
from exact_backfills.dagster_names import CLI_BACKFILL_TAG, RELEASE_TAG
from exact_backfills.dagster_private import BACKFILL_ID_TAG
from exact_backfills.declare import Pipeline
from resources import control
from resources.delta_io import Commit, day_runs


class Operation(Enum):
    """Why days change: named in every commit, audit row and message of the change."""

    BACKFILL = "backfill"  # built from the landing: a run of the assets (the UI's, the command line's, a repair)
    RESTATEMENT = "restatement"  # the days batches landed since the watermark change
    ROLLBACK = "rollback"  # read as of earlier Delta versions, then held
    RELEASE = "release"  # days held since a rollback, built from the landing again, then released
    PROMOTION = "promotion"  # the days a plan for a code change found changed, from its shadow tables
    RENAME = "rename"  # a renamed table's days, moved from the table it was published as before

    @property
    def verb(self) -> str:
        return {Operation.ROLLBACK: "restored", Operation.RENAME: "renamed"}.get(self, "written")

    def refusal_hint(self) -> str:
        if self is Operation.ROLLBACK:
            return "Roll back the tables it is built from too (--before-run RUN restores everything a run wrote)."
        return (
            "Fix the rows the failing checks name (or withdraw the landed file they come from), then run the same "
            "days again; `check` shows what is published now."
        )


@dataclass(frozen=True)
class Rebuilt:
    """Rows built by the table's build, from the landing and its upstream tables."""


@dataclass(frozen=True)
class Restated:
    """Rows built by the table's restatement build, from what it holds plus the batches just read."""

    landed: LandedBatches


@dataclass(frozen=True)
class Restored:
    """Rows as of an earlier Delta version of the table (-1: before it existed), and of its side tables', on the days
    restored (`days`; empty: every day of the change). The change's other days of the table are rebuilt from what the
    change leaves upstream: the days its restored upstream days reach through a day dependency."""

    version: int
    side_versions: dict[str, int] = field(default_factory=dict)
    built_by: str | None = None  # the code version that wrote that version (None: not recorded)
    days: frozenset[date] = frozenset()

    def restores(self, day: date) -> bool:
        return not self.days or day in self.days


@dataclass(frozen=True)
class FromPlan:
    """Rows a plan built beside the lake (its shadow tables), with the code loaded now."""

    plan_id: str


@dataclass(frozen=True)
class Renamed:
    """Rows of a renamed table as the table it was published as before (`former`) holds them now, with the code version
    that last wrote each day there."""

    former: str
    built_by: dict[date, str | None] = field(default_factory=dict)


RowSource = Rebuilt | Restated | Restored | FromPlan | Renamed


# In each day's materialization metadata: the code version that built the day.
CODE_VERSION = "code_version"


def built_by(pipeline: Pipeline, table: str, source: RowSource, day: date | None = None) -> str | None:
    """The code version of the rows a source gives (on `day`): the code loaded now, unless they are restored older
    rows. A commit mixing restored and rebuilt days names the restored rows' code."""
    if isinstance(source, Restored) and (day is None or source.restores(day)):
        return source.built_by
    if isinstance(source, Renamed):
        return source.built_by.get(day) if day else ", ".join(sorted({str(v) for v in source.built_by.values()}))
    return code_versions.current(pipeline)[table]


@dataclass(frozen=True)
class Hold:
    """Why a rollback holds its days (the range it restores, not the days it rebuilds beyond it), and the landed
    batches with rows on them then."""

    why: str
    batches: str
    days: tuple[date, ...] = ()


@dataclass(frozen=True)
class Change:
    """Days to change: table -> days, where each table's rows come from (Rebuilt unless said), and why."""

    operation: Operation
    days: dict[str, list[date]]
    sources: dict[str, RowSource] = field(default_factory=dict)
    hold: Hold | None = None  # a rollback's: its days are held once committed
    note: dict[str, Any] = field(default_factory=dict)  # more for every commit's userMetadata (a promotion's plan)

    def source(self, table: str) -> RowSource:
        return self.sources.get(table, Rebuilt())

    def tables(self) -> list[str]:
        """The tables it writes, in the order its days are given (publish order, once `publishing` has it)."""
        return [t for t in self.days if self.days[t]]

    def every_day(self) -> list[date]:
        return sorted({d for days in self.days.values() for d in days})


@dataclass(frozen=True)
class RunInfo:
    """Who writes: recorded in every Delta commit, the audit trail and quarantine rows."""

    run_id: str
    backfill_id: str | None = None

    @classmethod
    def of(cls, run: DagsterRun) -> "RunInfo":
        """A Dagster run's: its backfill is Dagster's (the UI's) or the command line's."""
        return cls(run.run_id, run.tags.get(BACKFILL_ID_TAG) or run.tags.get(CLI_BACKFILL_TAG))


def operation_of(run: DagsterRun) -> Operation:
    """What a run of the assets does: a release when tagged so, else a backfill."""
    return Operation.RELEASE if run.tags.get(RELEASE_TAG) == "true" else Operation.BACKFILL


@dataclass
class Publication:
    days: list[date]
    outcomes: list[checks.Outcome]  # every check result, one per check per day
    metadata: dict[str, dict[date, dict[str, Any]]]  # per table written (and its side tables): each day's figures
    totals: dict[str, dict[str, Any]] = field(default_factory=dict)  # per table written: the run's figures
    # Per table built from this one: the days this table's changed days leave stale outside the change, recorded
    # pending for the next restatement.
    left_stale: dict[str, list[date]] = field(default_factory=dict)
    side_outcomes: dict[str, list[checks.Outcome]] = field(default_factory=dict)  # per side table written: its checks


def day_ranges(days: list[date]) -> str:
    return ", ".join(f"{a}..{b}" if a != b else str(a) for a, b in day_runs(days))


def _first_items(lines: list[str], most: int) -> str:
    return "; ".join(lines[:most]) + (f"; and {len(lines) - most} more" if len(lines) > most else "")


class Refused(RuntimeError):
    """Nothing was written, in any table: a blocking check failed on some table's day (`failing`), or days of the
    change are held since a rollback (`holds`)."""

    def __init__(
        self,
        change: Change,
        failing: dict[str, list[checks.Outcome]] | None = None,
        holds: list[control.HeldDay] | None = None,
        release: str = "release",
    ):
        self.change, self.failing, self.holds = change, failing or {}, holds or []
        op, days = change.operation, day_ranges(change.every_day())
        if self.holds:
            message = (
                f"{op.value} of {days} refused, nothing {op.verb}: {len(self.holds)} day(s) held since a "
                f"rollback: {_first_items([h.describe() for h in self.holds], 5)}. Publish them again with "
                f"`{release} --start D1 --end D2`, or leave them out."
            )
        else:
            lines = [
                f"{o.check} of {t} on {o.day}: {checks.summary(o)}"
                for t, outcomes in self.failing.items()
                for o in outcomes
            ]
            message = (
                f"{op.value} of {days} refused, nothing {op.verb} in any of {', '.join(change.tables())}: "
                f"blocking checks failed in {', '.join(self.failing)}: {_first_items(lines, 10)}. "
                f"{op.refusal_hint()}"
            )
        super().__init__(message)

    @property
    def failing_days(self) -> list[str]:
        return sorted({o.day.isoformat() for outcomes in self.failing.values() for o in outcomes})


class PartlyPublished(RuntimeError):
    """The change failed after committing some of its tables: those hold its days, the others their previous
    content. Making the same change again publishes them all."""

    def __init__(self, pipeline: Pipeline, change: Change, commits: dict[str, Commit], cause: BaseException):
        # Side tables have their table's days.
        self.plan = {
            name: change.days[pipeline.side_table_of.get(name, name)]
            for name in pipeline.with_side_tables(change.tables())
        }
        self.operation, self.commits, self.cause = change.operation, commits, cause
        self.not_committed = [t for t in self.plan if t not in commits]
        committed = ", ".join(
            f"{t} ({f'version {c.version}' if c.version is not None else 'no change'}, {day_ranges(self.plan[t])})"
            for t, c in commits.items()
        )
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
        super().__init__(
            f"{self.operation.value} failed after committing {committed}; not committed: "
            f"{', '.join(self.not_committed) or 'none'} ({type(cause).__name__}: {first}). These days are published in "
            f"some tables only until the same {self.operation.value} is run again."
        )
