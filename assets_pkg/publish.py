"""Publishing: the one way rows reach the lake, for a backfill's range and a restatement's scattered days alike.

A run publishes its tables as a whole, in four stages:
- build: every table's days, in the graph's order; a table reads its upstream tables' days from what this run
  builds for them, and any other day from what is published;
- verify: every blocking check of every table on every day. One failing day and nothing at all is written
  (reconcile before publish, across the graph: staging and fact can no longer be published without their marts);
- commit: replace exactly the days (`overwrite_days`), one Delta commit per table, in the graph's order;
- record: fingerprints, row-count changes and the audit trail (one append for the run), per-day figures.

A failure during the commits (a conflict, a lost executor) raises PartlyPublished, which says which tables were
committed for which days; the run is then repaired by running it again (see automation.late_data_sensor)."""

import os
import signal
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from assets_pkg import checks, landing, quarantine
from assets_pkg.tables import BY_NAME, DAY_COLUMN, PUBLISH_ORDER, QUARANTINE_ORDER_ITEMS, Build, Staged
from resources import audit, control
from resources.delta_io import Commit, Scan, day_filter, day_runs, overwrite_days, read_days, scan_of_table, table_exists

# On each run of a command-line backfill (which is not a Dagster backfill: see backfill.runs_url), its id.
CLI_BACKFILL_TAG = "exact_backfills/backfill"


@dataclass(frozen=True)
class RunInfo:
    """Who writes: recorded in every Delta commit, the audit trail and quarantine rows."""

    run_id: str
    backfill_id: str | None = None

    @classmethod
    def of(cls, run) -> "RunInfo":
        """A Dagster run's: its backfill is Dagster's (the UI's) or the command line's."""
        return cls(run.run_id, run.tags.get("dagster/backfill") or run.tags.get(CLI_BACKFILL_TAG))


@dataclass
class Publication:
    days: list[date]
    outcomes: list[checks.Outcome]  # every check result, one per check per day
    metadata: dict[str, dict[date, dict]]  # per table written (the table and its side tables): each day's figures
    totals: dict[str, dict] = field(default_factory=dict)  # per table written: the run's figures over all its days


def day_ranges(days: list[date]) -> str:
    return ", ".join(f"{a}..{b}" if a != b else str(a) for a, b in day_runs(days))


class GraphNotPublished(RuntimeError):
    """A blocking check failed on some table's day: nothing was written, in any table."""

    def __init__(self, plan: dict[str, list[date]], outcomes: dict[str, list[checks.Outcome]]):
        self.plan = plan
        self.failing = {t: [o for o in found if not o.passed] for t, found in outcomes.items()}
        self.failing = {t: found for t, found in self.failing.items() if found}
        lines = [f"{o.check} of {t} on {o.day}: {checks.summary(o)}" for t, found in self.failing.items() for o in found]
        super().__init__(
            f"blocking checks failed in {', '.join(self.failing)}; nothing written in any of "
            f"{', '.join(plan)} ({day_ranges(sorted({d for days in plan.values() for d in days}))}). "
            + "; ".join(lines[:10]) + (f"; and {len(lines) - 10} more" if len(lines) > 10 else "")
        )
        self.failing_days = sorted({o.day.isoformat() for found in self.failing.values() for o in found})


class HeldDays(RuntimeError):
    """Days of the run are held since a rollback: nothing was written. Released by `release`, which publishes them."""

    def __init__(self, holds: list):
        self.holds = holds
        super().__init__(
            f"{len(holds)} day(s) held since a rollback, nothing written: "
            + "; ".join(describe_hold(h) for h in holds[:5]) + (f"; and {len(holds) - 5} more" if len(holds) > 5 else "")
            + ". Publish them again with `python -m assets_pkg release --start D1 --end D2`, or leave them out."
        )


def describe_hold(hold) -> str:
    """Who held a day, when and why, and the landed batches with rows on it then."""
    return (f"{hold.day} held since {hold.held_at:%Y-%m-%d %H:%M} UTC by run {hold.held_by_run} ({hold.why}; landed "
            f"batches with rows on it: {hold.batches or 'none'})")


class PartlyPublished(RuntimeError):
    """The run failed after committing some of its tables: those hold this run's days, the others their previous
    content. Running the same days again publishes them all."""

    def __init__(self, plan: dict[str, list[date]], commits: dict[str, Commit], cause: BaseException):
        # Side tables have their table's days.
        plan = {**plan, **{side: plan[t] for t in list(plan) for side in BY_NAME[t].side_tables}}
        self.plan, self.commits, self.cause = plan, commits, cause
        self.not_committed = [t for t in plan if t not in commits]
        committed = ", ".join(
            f"{t} ({f'version {c.version}' if c.version is not None else 'no change'}, {day_ranges(plan[t])})"
            for t, c in commits.items())
        super().__init__(
            f"failed after committing {committed}; not committed: {', '.join(self.not_committed) or 'none'} "
            f"({type(cause).__name__}: {str(cause).strip().splitlines()[0] if str(cause).strip() else ''}). "
            "These days are published in some tables only until the same days are run again."
        )


# For the fault-injection tests: EXACT_BACKFILLS_KILL_AT=<point> kills this process with SIGKILL when it reaches that
# point, as an OOM kill or a lost machine would: "before-commits" (built and verified, nothing committed),
# "commit:<table>" (just after that table's commit), "before-watermark" (a restatement's commits done, its watermark
# not yet advanced).
KILL_AT = "EXACT_BACKFILLS_KILL_AT"


def fault_point(name: str) -> None:
    if os.environ.get(KILL_AT) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def publish(
    spark: SparkSession, plan: dict[str, list[date]], run: "RunInfo", builds: dict[str, Build] | None = None,
    held: str = "refuse",
) -> dict[str, Publication]:
    """Publish `plan` (table -> days) as a whole: build, verify, commit, record (see the module's docstring).
    `builds` replaces tables' own builds (a restatement's staging build). A day held since a rollback is refused
    (HeldDays, nothing written), unless `held` is "release" (published, then released: `release`) or "keep" (a
    rollback rebuilding tables derived from what it restored). Raises GraphNotPublished, having written nothing,
    when a blocking check fails; PartlyPublished when a failure comes after the first commit."""
    started = datetime.now(timezone.utc)
    t0 = time.monotonic()
    order = [t for t in PUBLISH_ORDER if plan.get(t)]
    plan = {t: sorted(set(plan[t])) for t in order}
    every_day = sorted({d for days in plan.values() for d in days})
    holds = control.open_holds(spark, every_day) if every_day else []
    if holds and held == "refuse":
        raise HeldDays(holds)
    staged: dict[str, Staged] = {}
    try:
        for table in order:
            staged[table] = _build(spark, table, plan, staged, (builds or {}).get(table) or BY_NAME[table].build)
        verified = {table: _verify(staged[table], table, plan[table]) for table in order}
        outcomes = {table: found for table, (found, _) in verified.items()}
        if any(not o.passed for found in outcomes.values() for o in found):
            raise GraphNotPublished(plan, outcomes)
        commits = _commit(staged, plan, run)
        try:
            published = _record(spark, staged, plan, run, verified, commits, started, t0)
            if held == "release":
                control.release_holds(spark, [h.day for h in holds], run.run_id, datetime.now(timezone.utc))
            return published
        except Exception as e:
            raise PartlyPublished(plan, commits, e) from e
    finally:
        for built in staged.values():
            for cached in [built.table, *built.persisted]:
                cached.unpersist()


def _build(spark: SparkSession, table: str, plan: dict, staged: dict[str, Staged], build: Build) -> Staged:
    scans: list[Scan] = []

    def published(upstream: str, days: list[date]) -> DataFrame:
        df = read_days(spark, upstream, DAY_COLUMN[upstream], days)
        scans.append(scan_of_table(df, upstream))
        return df

    def read(upstream: str, days: list[date]) -> DataFrame:
        """`upstream`'s rows of `days`: this run's where it builds them, the published ones elsewhere."""
        if upstream not in staged:
            return published(upstream, days)
        ours = set(plan[upstream])
        mine, rest = sorted(set(days) & ours), sorted(set(days) - ours)
        built = staged[upstream].table
        parts = [built if set(mine) == ours else built.where(day_filter(DAY_COLUMN[upstream], mine))] if mine else []
        if rest and table_exists(spark, upstream):
            parts.append(published(upstream, rest))
        if not parts:
            return built.limit(0)
        return parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])

    result = build(spark, plan[table], read)
    result.table = result.table.persist()  # checked, read downstream and written from the same computed rows
    result.scans = [*result.scans, *scans]
    return result


def _verify(built: Staged, table: str, days: list[date]) -> tuple[list[checks.Outcome], dict]:
    return checks.evaluate_blocking(built.table, built.upstream, built.lost, BY_NAME[table].checks, days)


def _commit(staged: dict[str, Staged], plan: dict[str, list[date]], run: "RunInfo") -> dict[str, Commit]:
    """One commit per table, in the graph's order; a side table (rows accepted vs rows quarantined are two halves
    of one build) is committed just before its table."""
    commits: dict[str, Commit] = {}
    fault_point("before-commits")
    try:
        for table, days in plan.items():
            info = {"run_id": run.run_id, "backfill_id": run.backfill_id, "days": len(days), "first": days[0], "last": days[-1]}
            for side, side_df in staged[table].side_tables.items():
                side_df = side_df.withColumn("run_id", F.lit(run.run_id))  # which run put the row there
                commits[side] = overwrite_days(side_df, side, DAY_COLUMN[side], days, {**info, "asset": side})
            commits[table] = overwrite_days(staged[table].table, table, DAY_COLUMN[table], days, {**info, "asset": table})
            fault_point(f"commit:{table}")
    except Exception as e:
        if commits:
            raise PartlyPublished(plan, commits, e) from e
        raise
    return commits


def _source_watermark(df: DataFrame) -> datetime | None:
    """The newest load time (`ingested_at`) among the rows published, for tables that carry it."""
    if "ingested_at" not in df.columns:
        return None
    seconds = df.agg(F.max("ingested_at").cast("double")).first()[0]
    return datetime.fromtimestamp(seconds, tz=timezone.utc) if seconds is not None else None


def _record(spark, staged, plan, run, verified, commits, started, t0) -> dict[str, Publication]:
    found = audit.latest_before_run(spark, run.run_id)
    ended = datetime.now(timezone.utc)
    publications, audit_rows = {}, []
    for table, days in plan.items():
        outcomes, profile = verified[table]
        commit = commits[table]
        previous = {day: found[(table, day)] for day in days if (table, day) in found}
        outcomes = outcomes + checks.evaluate_after_commit(profile, previous, days)
        source_watermark = _source_watermark(staged[table].table)
        duplicates = {o.day: o.metadata["duplicate_per_1k"] for o in outcomes if o.check == checks.UNIQUE_KEY}
        mismatches = {o.day: o.metadata["mismatch_count"] for o in outcomes if o.check == checks.RECONCILES}
        changed = {o.day: o.metadata["changed"] for o in outcomes if o.check == checks.FINGERPRINT}
        audit_rows += [
            audit.AuditRow(
                run_id=run.run_id,
                backfill_id=run.backfill_id,
                operation="materialize",
                asset=table,
                partition=day,
                rows_written=profile[day]["rows"] if day in profile else 0,
                fingerprint=profile[day]["fingerprint"] if day in profile else None,
                delta_version=commit.version,
                started_at=started,
                ended_at=ended,
                source_watermark=source_watermark,
                duplicate_per_1k=duplicates.get(day),
                mismatch_count=mismatches.get(day),
            )
            for day in days
        ]
        if staged[table].after_commit:
            outcomes += staged[table].after_commit(spark, days, run.run_id, ended)
        metadata = {side: commit_metadata(commits[side], days) for side in BY_NAME[table].side_tables}
        totals = {side: commit_totals(commits[side], days) for side in BY_NAME[table].side_tables}
        metadata[table] = {
            day: {
                **day_metadata,
                "fingerprint": profile[day]["fingerprint"] if day in profile else "",
                "fingerprint_changed": changed.get(day, False),
                "duplicate_per_1k": duplicates.get(day, 0.0),
                **({"mismatch_count": mismatches[day]} if day in mismatches else {}),
                # The run's reads: what building these days scanned of the landing and of published tables.
                **({"scanned": {scan.source: scan.metadata() for scan in staged[table].scans}} if staged[table].scans else {}),
            }
            for day, day_metadata in commit_metadata(commit, days).items()
        }
        totals[table] = {
            **commit_totals(commit, days),
            "partitions_changed": sum(changed.values()),
            **({"watermark_lag_s": round((ended - source_watermark).total_seconds(), 1)} if source_watermark else {}),
        }
        publications[table] = Publication(days, outcomes, metadata, totals)
    audit.append(spark, audit_rows)
    duration = round(time.monotonic() - t0, 3)
    for publication in publications.values():
        for totals in publication.totals.values():
            totals["run_publish_s"] = duration
    return publications


def commit_metadata(commit: Commit, days: list[date]) -> dict[date, dict]:
    """Each day's figures of one commit (rows and files as Delta's log records them per partition)."""
    version = commit.version if commit.version is not None else -1
    return {
        day: {
            "rows_written": commit.by_day.get(day.isoformat(), {}).get("rows_written", 0),
            "files_added": commit.by_day.get(day.isoformat(), {}).get("files_added", 0),
            "files_removed": commit.by_day.get(day.isoformat(), {}).get("files_removed", 0),
            "delta_version": version,
            "written_with_days": day_ranges(days),  # the run's range, which this day was written with
        }
        for day in days
    }


def commit_totals(commit: Commit, days: list[date]) -> dict:
    return {
        "rows_written": commit.rows_written,
        "delta_version": commit.version if commit.version is not None else -1,
        "files_added": commit.files_added,
        "files_removed": commit.files_removed,
        "partitions": len(days),
    }


def check_published(spark: SparkSession, table: str, days: list[date]) -> tuple[list[checks.Outcome], dict]:
    """The blocking checks on what is published now (the same checks a publication runs before writing), and the
    days' profile (rows, fingerprint)."""
    tc = BY_NAME[table].checks
    df = read_days(spark, table, tc.day_column, days)
    rec = tc.reconciliation
    upstream = read_days(spark, rec.upstream, DAY_COLUMN[rec.upstream], days) if rec else None
    lost = None
    if tc.nothing_lost:
        quarantined = read_days(spark, QUARANTINE_ORDER_ITEMS, DAY_COLUMN[QUARANTINE_ORDER_ITEMS], days)
        lost = quarantine.lost_keys(landing.read_landing(spark, landing.ORDER_ITEMS), df, quarantined, days)
    return checks.evaluate_blocking(df, upstream, lost, tc, days)


def verify_published(spark: SparkSession, table: str, days: list[date], run: "RunInfo") -> list[checks.Outcome]:
    """Every check of `table` on what is published for `days`, without writing: the blocking checks; the fingerprint
    and row count against what the pipeline last wrote (a change behind its back fails them); up to date with the
    landing and late data outside the window, from the late-data detection."""
    from assets_pkg import late_data  # it publishes through this module; only a checks-only run needs its detection

    outcomes, profile = check_published(spark, table, days)
    found = audit.latest_before_run(spark, run.run_id)
    recorded = {day: found[(table, day)] for day in days if (table, day) in found}
    holds = {}
    try:
        detection = late_data.detect(spark)
        stale, outside = set(detection.days_by_table()[table]), set(detection.outside)
        holds = {h.day: h for h in detection.holds if h.day in set(days)}
    except late_data.RestatementError:  # staging not built yet: nothing landed is published, nothing is stale
        stale, outside = set(), set()
    outcomes += checks.evaluate_published(profile, recorded, days, stale)
    for o in outcomes:
        # Held since a rollback: what landed for the day is left out as the operator wants it, until released.
        if o.check in (checks.UP_TO_DATE, checks.NOTHING_LOST) and o.day in holds:
            o.passed = True
            o.metadata.update({"held": True, "why": describe_hold(holds[o.day])})
    if BY_NAME[table].checks.late_data:
        late = {e.day for e in control.open_exceptions(spark, days)} | outside
        outcomes += [checks.Outcome(checks.LATE_DATA, day, day not in late, {"late_rows_unpublished": day in late}) for day in days]
    return outcomes
