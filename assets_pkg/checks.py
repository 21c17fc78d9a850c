"""Partitioned asset checks, evaluated for every day of a run's range at once: grouped by day, never day by day.

Blocking checks (unique key, keys not null, reconciliation with the upstream table, nothing lost) run on the staged
result *before* it is committed: a failing day stops the write and the downstream steps (reconcile before publish).
The fingerprint and the row-count change are recorded after the commit.
"""

from dataclasses import dataclass, field
from datetime import date

from dagster import AssetCheckSeverity, AssetCheckSpec
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from assets_pkg.partitions import daily_partitions
from resources.settings import settings

UNIQUE_KEY = "unique_key"
KEYS_NOT_NULL = "keys_not_null"
RECONCILES = "reconciles_with_upstream"
NOTHING_LOST = "nothing_lost"
FINGERPRINT = "fingerprint"
ROW_COUNT_CHANGE = "row_count_change"
LATE_DATA = "late_data_outside_window"
UP_TO_DATE = "up_to_date_with_landing"

BLOCKING = (UNIQUE_KEY, KEYS_NOT_NULL, RECONCILES, NOTHING_LOST)
SAMPLE_SIZE = 5


def row_count_tolerance() -> float:
    """Largest accepted relative change of a day's row count against its previous materialization."""
    return settings().check_row_count_tolerance


def events_max_days() -> int:
    """Above this many days in one run, only the failing check results are logged day by day. Dagster's SQLite event
    log stores a check result in ~20 ms: 27 results a day over TPC-H's 2,406 days would add 20 minutes to a
    full-history run. Every day's numbers stay in backfill_audit, and the `check` command re-evaluates any range."""
    return settings().check_events_max_days


@dataclass(frozen=True)
class Reconciliation:
    """`measures` of a table must equal the same measures of `upstream` per day: name -> (SQL aggregate over this
    table, SQL aggregate over the upstream table)."""

    upstream: str
    measures: dict


@dataclass(frozen=True)
class TableChecks:
    key: list[str]
    day_column: str
    reconciliation: Reconciliation | None = None
    nothing_lost: bool = False
    late_data: bool = False  # days with late rows older than the restatement window (results on those days only)

    def names(self) -> list[str]:
        names = [UNIQUE_KEY, KEYS_NOT_NULL]
        names += [RECONCILES] if self.reconciliation else []
        names += [NOTHING_LOST] if self.nothing_lost else []
        return [*names, FINGERPRINT, ROW_COUNT_CHANGE, UP_TO_DATE]


@dataclass
class Outcome:
    check: str
    day: date
    passed: bool
    metadata: dict = field(default_factory=dict)

    @property
    def blocking(self) -> bool:
        return self.check in BLOCKING

    @property
    def severity(self) -> AssetCheckSeverity:
        return AssetCheckSeverity.ERROR if self.blocking or self.check == LATE_DATA else AssetCheckSeverity.WARN


_DESCRIPTIONS = {
    UNIQUE_KEY: "At most one row per natural key on the day. Metadata: duplicates per 1,000 rows.",
    KEYS_NOT_NULL: "No key column is null.",
    RECONCILES: "Row count and amounts equal the upstream table's for the day. Metadata: mismatch count.",
    NOTHING_LOST: "Every key whose latest landed version falls on the day is in the table or in quarantine (on a day "
    "held since a rollback, what landed is left out on purpose: metadata `held`, and who held it and why).",
    FINGERPRINT: "SHA-256 of the day's sorted rows, recorded on every materialization; says whether it changed.",
    ROW_COUNT_CHANGE: "Row count within CHECK_ROW_COUNT_TOLERANCE of the previous materialization (warning).",
    UP_TO_DATE: "Fails on a day whose landing data changed after it was written (late or corrected rows, a product "
    "version), as found by the late-data detection (restate_late_data or preview_late_data); passes when the day is "
    "rewritten. Metadata: why, and which batches; on a day held since a rollback, `held`, who held it and why.",
    LATE_DATA: "Fails on a day that received rows older than the restatement window (RESTATEMENT_WINDOW_DAYS): not "
    "restated automatically; backfill the day by hand, which makes it pass.",
}


def check_specs(table: str, checks: TableChecks) -> list[AssetCheckSpec]:
    # The blocking checks run on the staged rows before the write: a failing day stops it, the step fails, and
    # nothing downstream runs. Declared blocking so that Dagster shows them so (and would gate on them too).
    names = [*checks.names(), *([LATE_DATA] if checks.late_data else [])]
    return [
        AssetCheckSpec(
            name, asset=table, partitions_def=daily_partitions, description=_DESCRIPTIONS[name], blocking=name in BLOCKING
        )
        for name in names
    ]


def _row_hash(df: DataFrame):
    return F.sha2(F.concat_ws("\u001f", *[F.coalesce(F.col(c).cast("string"), F.lit("\\N")) for c in sorted(df.columns)]), 256)


def day_profile(df: DataFrame, checks: TableChecks, measures: list[str] = ()) -> DataFrame:
    """Per day, in one pass: rows, distinct keys, rows with a null key and the reconciliation measures."""
    null_key = F.greatest(*[F.col(c).isNull().cast("int") for c in checks.key]) if len(checks.key) > 1 else F.col(checks.key[0]).isNull().cast("int")
    return df.groupBy(F.col(checks.day_column).alias("day")).agg(
        F.count(F.lit(1)).alias("rows"),
        F.countDistinct(*checks.key).alias("distinct_keys"),
        F.sum(null_key).alias("null_key_rows"),
        *[expr.alias(name) for name, expr in measures],
    )


def day_fingerprints(df: DataFrame, day_column: str) -> DataFrame:
    """Per day: rows and the SHA-256 fingerprint of the day's sorted rows. An aggregation of its own: next to the
    distinct key count, Spark carries every key's list of row hashes through two shuffles (TPC-H SF1's fact: 20-30 s
    against 10 s for both apart)."""
    return df.groupBy(F.col(day_column).alias("day")).agg(
        F.count(F.lit(1)).alias("rows"),
        F.sha2(F.concat_ws(",", F.array_sort(F.collect_list(_row_hash(df)))), 256).alias("fingerprint"),
    )


def duplicate_samples(df: DataFrame, checks: TableChecks, days: list[date]) -> dict[date, list[str]]:
    dups = (
        df.where(F.col(checks.day_column).isin(days))
        .groupBy(checks.day_column, *checks.key)
        .count()
        .where("count > 1")
        .collect()
    )
    samples: dict[date, list[str]] = {}
    for r in dups:
        keys = samples.setdefault(r[checks.day_column], [])
        if len(keys) < SAMPLE_SIZE:
            keys.append(", ".join(f"{k}={r[k]}" for k in checks.key))
    return samples


def evaluate_blocking(
    df: DataFrame, upstream: DataFrame | None, lost: DataFrame | None, checks: TableChecks, days: list[date]
) -> tuple[list[Outcome], dict]:
    """The blocking checks for each of `days`. Returns the outcomes and the per-day profile of `df`."""
    rec = checks.reconciliation
    this_measures = [(name, F.expr(exprs[0])) for name, exprs in rec.measures.items()] if rec else []
    profile = {r.day: r.asDict() for r in day_profile(df, checks, this_measures).collect()}
    for r in day_fingerprints(df, checks.day_column).collect():
        profile[r.day]["fingerprint"] = r.fingerprint
    outcomes: list[Outcome] = []

    failing_unique = [d for d, r in profile.items() if r["rows"] != r["distinct_keys"]]
    samples = duplicate_samples(df, checks, failing_unique) if failing_unique else {}
    for day in days:
        r = profile.get(day)
        rows = r["rows"] if r else 0
        duplicates = rows - r["distinct_keys"] if r else 0
        outcomes.append(
            Outcome(UNIQUE_KEY, day, duplicates == 0, {
                "rows": rows,
                "duplicate_rows": duplicates,
                "duplicate_per_1k": round(1000 * duplicates / rows, 3) if rows else 0.0,
                "sample_duplicate_keys": "; ".join(samples.get(day, [])),
            })
        )
        nulls = (r["null_key_rows"] or 0) if r else 0
        outcomes.append(Outcome(KEYS_NOT_NULL, day, nulls == 0, {"null_key_rows": nulls, "key": ", ".join(checks.key)}))

    if rec:
        up_profile = {
            r.day: r
            for r in upstream.groupBy(F.col(checks.day_column).alias("day"))
            .agg(*[F.expr(exprs[1]).alias(name) for name, exprs in rec.measures.items()])
            .collect()
        }
        differing = {}
        for day in days:
            mine, theirs = profile.get(day), up_profile.get(day)
            for name in rec.measures:
                a = (mine[name] if mine else None) or 0
                b = (theirs[name] if theirs else None) or 0
                if a != b:
                    differing.setdefault(day, {})[name] = {"table": str(a), rec.upstream: str(b)}
        for day in days:
            diff = differing.get(day, {})
            outcomes.append(
                Outcome(RECONCILES, day, not diff, {
                    "upstream": rec.upstream,
                    "mismatch_count": len(diff),
                    "mismatches": ", ".join(f"{m}: {v['table']} vs {v[rec.upstream]}" for m, v in diff.items()),
                    "mismatching_days_in_run": len(differing),
                })
            )

    if lost is not None:
        lost_by_day: dict[date, list] = {}
        for r in lost.collect():
            lost_by_day.setdefault(r.day, []).append(r)
        for day in days:
            missing = lost_by_day.get(day, [])
            outcomes.append(
                Outcome(NOTHING_LOST, day, not missing, {
                    "missing_keys": len(missing),
                    "sample_missing_keys": "; ".join(", ".join(f"{k}={m[k]}" for k in checks.key) for m in missing[:SAMPLE_SIZE]),
                })
            )
    return outcomes, profile


def summary(o: Outcome) -> str:
    """One line a person can act on: the numbers that made the check fail."""
    keys = ("duplicate_rows", "sample_duplicate_keys", "null_key_rows", "mismatches", "missing_keys", "sample_missing_keys",
            "rows", "previous_rows", "relative_change")
    return ", ".join(f"{k}={o.metadata[k]}" for k in keys if o.metadata.get(k) not in (None, "", 0))


def _row_count_change(day: date, rows: int, previous_rows: int | None, tolerance: float) -> Outcome:
    change = None if not previous_rows else abs(rows - previous_rows) / previous_rows
    return Outcome(ROW_COUNT_CHANGE, day, change is None or change <= tolerance, {
        "rows": rows,
        "previous_rows": previous_rows if previous_rows is not None else -1,
        "relative_change": round(change, 4) if change is not None else 0.0,
        "tolerance": tolerance,
    })


def evaluate_after_commit(profile: dict, previous: dict, days: list[date]) -> list[Outcome]:
    """Fingerprint and row-count change against each day's previous materialization (`previous`: day -> (rows, fp))."""
    tolerance = row_count_tolerance()
    outcomes = []
    for day in days:
        r = profile.get(day)
        rows, fingerprint = (r["rows"], r["fingerprint"]) if r else (0, None)
        prev_rows, prev_fp = previous.get(day, (None, None))
        outcomes.append(
            Outcome(FINGERPRINT, day, True, {
                "fingerprint": fingerprint or "",
                "previous_fingerprint": prev_fp or "",
                "changed": prev_fp is not None and prev_fp != fingerprint,
            })
        )
        outcomes.append(_row_count_change(day, rows, prev_rows, tolerance))
        # Just rewritten from what is landed now: no landed change is left unpublished on the day.
        outcomes.append(Outcome(UP_TO_DATE, day, True, {"stale": False}))
    return outcomes


def evaluate_published(profile: dict, recorded: dict, days: list[date], stale: set[date]) -> list[Outcome]:
    """Fingerprint, row count and freshness of what is published, against what the pipeline last wrote (`recorded`:
    day -> (rows, fingerprint)) and the days the landing has changed since (`stale`)."""
    tolerance = row_count_tolerance()
    outcomes = []
    for day in days:
        r = profile.get(day)
        rows, fingerprint = (r["rows"], r["fingerprint"]) if r else (0, None)
        written_rows, written_fp = recorded.get(day, (None, None))
        outcomes.append(
            Outcome(FINGERPRINT, day, written_fp is None or written_fp == fingerprint, {
                "fingerprint": fingerprint or "",
                "fingerprint_written": written_fp or "",
                "changed_since_written": written_fp is not None and written_fp != fingerprint,
            })
        )
        outcomes.append(_row_count_change(day, rows, written_rows, tolerance))
        outcomes.append(Outcome(UP_TO_DATE, day, day not in stale, {"stale": day in stale}))
    return outcomes
