"""Partitioned asset checks, evaluated for every day of a run's range at once: grouped by day, never day by day.

Blocking checks (unique key, keys not null, reconciliation with the upstream table, nothing lost, and the user's
blocking checks) run on the staged result *before* it is committed: a failing day stops the write and the downstream
steps (reconcile before publish). The user's other checks run with them and warn. The fingerprint and the row-count
change are recorded after the commit.
"""

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any

from dagster import AssetCheckSeverity, AssetCheckSpec
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import MapType

from exact_backfills.declare import FILE_COLUMN, DayCheck, Declared, Reconcile, SideTable, Staging
from exact_backfills.landing import REFUSED_FILE
from exact_backfills.partitions import daily_partitions
from exact_backfills.quarantine import REASON
from resources.audit import DayContent
from resources.settings import settings

UNIQUE_KEY = "unique_key"
KEYS_NOT_NULL = "keys_not_null"
RECONCILES = "reconciles_with_upstream"
NOTHING_LOST = "nothing_lost"
FINGERPRINT = "fingerprint"
ROW_COUNT_CHANGE = "row_count_change"
LATE_DATA = "late_data_outside_window"
UP_TO_DATE = "up_to_date_with_landing"
BUILT_BY_CURRENT_CODE = "built_by_current_code"
QUARANTINED = "quarantined_rows"  # a quarantine side table's one check

BLOCKING = (UNIQUE_KEY, KEYS_NOT_NULL, RECONCILES, NOTHING_LOST)
SAMPLE_SIZE = 5
# In a result's metadata: why the check could not be evaluated, or why the user's check raised.
ERROR = "error"


def row_count_tolerance() -> float:
    """Largest accepted relative change of a day's row count against its previous materialization."""
    return settings().check_row_count_tolerance


def events_max_days() -> int:
    """Above this many days in one run, only the failing check results are logged day by day: Dagster stores each
    event one by one, which a run over years of days would spend most of its time on. Every day's numbers stay in
    backfill_audit, and the `check` command re-evaluates any range."""
    return settings().check_events_max_days


BUILT_IN = (
    UNIQUE_KEY,
    KEYS_NOT_NULL,
    RECONCILES,
    NOTHING_LOST,
    FINGERPRINT,
    ROW_COUNT_CHANGE,
    UP_TO_DATE,
    BUILT_BY_CURRENT_CODE,
    LATE_DATA,
    QUARANTINED,
)


def checks_nothing_lost(table: Declared) -> bool:
    """Nothing lost is checked where an events source is read: landing -> staging + quarantine. A table reconciling
    with staging then carries it on, so a key cannot vanish anywhere without a check failing."""
    return isinstance(table, Staging) and table.events


def publishes_late_rows(table: Declared) -> bool:
    """The table takes a source into the lake: late_data_outside_window on its days, and publishing a day from every
    batch that can hold it resolves the day's late-data exceptions."""
    return isinstance(table, Staging)


def names(table: Declared) -> list[str]:
    """Every check of a table, the built-in ones first."""
    found = [UNIQUE_KEY, KEYS_NOT_NULL]
    found += [RECONCILES] if table.reconcile else []
    found += [NOTHING_LOST] if checks_nothing_lost(table) else []
    late = [LATE_DATA] if publishes_late_rows(table) else []
    return [
        *found,
        FINGERPRINT,
        ROW_COUNT_CHANGE,
        UP_TO_DATE,
        BUILT_BY_CURRENT_CODE,
        *late,
        *(c.name for c in table.checks),
    ]


@dataclass
class Outcome:
    check: str
    day: date
    passed: bool
    metadata: dict = field(default_factory=dict)
    blocking: bool = False

    def __post_init__(self) -> None:
        self.blocking = self.blocking or self.check in BLOCKING

    @property
    def severity(self) -> AssetCheckSeverity:
        return AssetCheckSeverity.ERROR if self.blocking or self.check == LATE_DATA else AssetCheckSeverity.WARN


_DESCRIPTIONS = {
    UNIQUE_KEY: "At most one row per natural key on the day. Metadata: duplicates per 1,000 rows.",
    KEYS_NOT_NULL: "No key column is null.",
    RECONCILES: "Row count and amounts equal the upstream table's for the day. Metadata: mismatch count.",
    NOTHING_LOST: "Every key whose latest landed version falls on the day is in the table or in quarantine (on a day "
    "held since a rollback, what landed is left out on purpose: metadata `held`, and who held it and why).",
    FINGERPRINT: "A SHA-256 of the day's rows whatever their order, recorded on every materialization; says whether "
    "it changed.",
    ROW_COUNT_CHANGE: "Row count within CHECK_ROW_COUNT_TOLERANCE of the previous materialization (warning).",
    UP_TO_DATE: "Fails on a day whose landing data changed after it was written (late or corrected rows, a product "
    "version), as found by the late-data detection (restate_late_data or preview_late_data); passes when the day is "
    "rewritten. Metadata: why, and which batches; on a day held since a rollback, `held`, who held it and why.",
    BUILT_BY_CURRENT_CODE: "Fails on a day built by an older version of the table's code, or built from such a day of "
    "a table it reads (code versions are derived from the code: a change to a transform makes exactly its days, and "
    "the days built from them, stale). Passes when the day is written by the code loaded now. Metadata: why.",
    LATE_DATA: "Fails on a day that received rows older than the restatement window (RESTATEMENT_WINDOW_DAYS): not "
    "restated automatically; backfill the day by hand, which makes it pass.",
    QUARANTINED: "The day's rows held in quarantine, counted by reason (metadata: quarantined_rows, by_reason), and "
    "the landed files the contract refused, unread (refused_files). Fails (a warning) on a day with a refused file: "
    "its rows are not published until it is withdrawn (`withdraw`) or landed again fixed. Rows quarantined with a "
    "reason are accounted for: `nothing_lost` of the staging table counts them.",
}


def check_specs(table: Declared) -> list[AssetCheckSpec]:
    # The blocking checks run on the staged rows before the write: a failing day stops it, the step fails, and
    # nothing downstream runs. Declared blocking so that Dagster shows them so (and would gate on them too).
    users = {c.name: c for c in table.checks}
    return [
        AssetCheckSpec(
            name,
            asset=table.name,
            partitions_def=daily_partitions,
            description=_DESCRIPTIONS[name] if name in _DESCRIPTIONS else _user_description(users[name]),
            blocking=name in BLOCKING or (name in users and users[name].blocking),
        )
        for name in names(table)
    ]


def quarantine_check_specs(side: SideTable) -> list[AssetCheckSpec]:
    """A quarantine side table's check: what it holds each day, by reason, and the refused files."""
    return [
        AssetCheckSpec(
            QUARANTINED, asset=side.name, partitions_def=daily_partitions, description=_DESCRIPTIONS[QUARANTINED]
        )
    ]


def quarantine_outcomes(rows: DataFrame, day_column: str, days: list[date]) -> list[Outcome]:
    """quarantined_rows on each of `days` of a quarantine table's `rows`: how many, by reason, and the refused files
    (failing on a day that has one)."""
    found: dict[date, dict[str, int]] = {}
    refused: dict[date, list[str]] = {}
    for r in (
        rows.groupBy(F.col(day_column).alias("day"), REASON)
        .agg(F.count(F.lit(1)).alias("rows"), F.collect_set(FILE_COLUMN).alias("files"))
        .collect()
    ):
        why = str(r[REASON])
        if why.startswith(REFUSED_FILE):
            refused.setdefault(r.day, []).extend(sorted(str(f) for f in r.files))
            why = REFUSED_FILE
        found.setdefault(r.day, {})[why] = found.get(r.day, {}).get(why, 0) + r.rows
    outcomes = []
    for day in days:
        by_reason, files = found.get(day, {}), sorted(refused.get(day, []))
        metadata = {
            "quarantined_rows": sum(by_reason.values()),
            "by_reason": ", ".join(f"{why}={n}" for why, n in sorted(by_reason.items())),
            "refused_files": "; ".join(files),
            "refused_file_count": len(files),
        }
        outcomes.append(Outcome(QUARANTINED, day, not files, metadata))
    return outcomes


def _user_description(check: DayCheck) -> str:
    figures = ", ".join(f"{name} = {sql}" for name, sql in check.figures.items())
    return (check.description or f"{check.name}, the pipeline's own check of each day.") + f" Figures: {figures}."


# A day's fingerprint is built from a hash of each row without sorting the day's rows: four 64-bit xxHash64 of the
# row's typed values (each seeded by its position), with a mask of its null columns (Spark's hash skips a null), are
# split into eight 32-bit halves, which are summed per day as 64-bit integers (exact up to 2^31 rows a day; a sum does
# not depend on the rows' order); the fingerprint is the SHA-256 of the row count and the eight sums. Equal rows (as
# a multiset, duplicates counted) give equal fingerprints whatever their order. Different rows give the same one only
# if all eight sums agree: for rows not built to collide, a chance of the order of 2^-256 (sums of hashes are no
# defence against rows crafted to collide). Values are hashed as they are typed: casting each to text first costs more
# than the rest of a day's checks.
_HASHES = 4
_MASK_BITS = 62


def _hashed(df: DataFrame) -> list[Column]:
    """The row as its hash takes it: each column in the order of their names (a map, which Spark does not hash, as its
    text), then which of them are null, as bits of longs."""
    fields = sorted(df.schema.fields, key=lambda f: f.name)
    values = [F.col(f.name).cast("string") if isinstance(f.dataType, MapType) else F.col(f.name) for f in fields]
    masks = []
    for start in range(0, len(fields), _MASK_BITS):
        bits = [
            F.when(F.col(f.name).isNull(), F.lit(1 << bit)).otherwise(F.lit(0))
            for bit, f in enumerate(fields[start : start + _MASK_BITS])
        ]
        masks.append(sum(bits, F.lit(0).cast("long")))
    return [*values, *masks]


def _hash_part_sums(df: DataFrame) -> list[Column]:
    values = _hashed(df)
    sums = []
    for i in range(_HASHES):
        h = F.xxhash64(F.lit(i), *values)
        sums += [F.sum(F.shiftrightunsigned(h, 32)), F.sum(h.bitwiseAND(F.lit(0xFFFFFFFF)))]
    return [total.alias(f"_hash_sum{i}") for i, total in enumerate(sums)]


def _fingerprint(rows: Column) -> Column:
    parts = [F.col(f"_hash_sum{i}").cast("string") for i in range(2 * _HASHES)]
    return F.sha2(F.concat_ws(":", rows.cast("string"), *parts), 256)


@dataclass(frozen=True)
class DayProfile:
    """What the checks found of one day's rows."""

    rows: int
    distinct_keys: int
    null_key_rows: int
    fingerprint: str | None
    measures: dict[str, Any] = field(default_factory=dict)  # the reconciliation's measures over the day's rows

    @property
    def duplicate_rows(self) -> int:
        return self.rows - self.distinct_keys

    @property
    def duplicate_per_1k(self) -> float:
        return round(1000 * self.duplicate_rows / self.rows, 3) if self.rows else 0.0

    @property
    def content(self) -> DayContent:
        return DayContent(self.rows, self.fingerprint)


NO_ROWS = DayProfile(rows=0, distinct_keys=0, null_key_rows=0, fingerprint=None)


@dataclass
class Verified:
    """The blocking checks' results on a table's days, with each day's profile and its reconciliation mismatches."""

    outcomes: list[Outcome]
    profiles: dict[date, DayProfile]
    mismatches: dict[date, int] = field(default_factory=dict)  # per day: how many measures differ from the upstream's
    # Per table reconciling with this one (`downstream` of evaluate_blocking), per day: its upstream measures over
    # these rows.
    for_downstream: dict[str, dict[date, dict[str, Any]]] = field(default_factory=dict)

    @property
    def failing(self) -> list[Outcome]:
        """The blocking checks failing: what refuses a change."""
        return [o for o in self.outcomes if not o.passed and o.blocking]

    def profile(self, day: date) -> DayProfile:
        return self.profiles.get(day, NO_ROWS)


def _day_profile(df: DataFrame, key: list[str], day_column: str, measures: list[tuple[str, Column]]) -> DataFrame:
    """Per day, in one pass: rows, distinct keys, rows with a null key, the reconciliation measures and the
    fingerprint."""
    null_key = (
        F.greatest(*[F.col(c).isNull().cast("int") for c in key])
        if len(key) > 1
        else F.col(key[0]).isNull().cast("int")
    )
    distinct_keys = distinct_keys_by_day(df, key, day_column)
    return (
        df.groupBy(F.col(day_column).alias("day"))
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.sum(null_key).alias("null_key_rows"),
            *[expr.alias(name) for name, expr in measures],
            *_hash_part_sums(df),
        )
        .withColumn("fingerprint", _fingerprint(F.col("rows")))
        .join(distinct_keys, "day", "left")
        .withColumn("distinct_keys", F.coalesce(F.col("distinct_keys"), F.lit(0)))
    )


def distinct_keys_by_day(df: DataFrame, key: list[str], day_column: str) -> DataFrame:
    """Per day with a key: how many distinct keys (null keys left out).

    A pass of its own: beside the profile's aggregates a distinct count makes Spark expand every row once per aggregate
    group. Each key's first row is numbered rather than the keys aggregated: on rows held by day Spark sorts each
    partition and keeps one row per key (a group limit), where a hash aggregation of every key of a partition spills."""
    first = F.row_number().over(Window.partitionBy("day", *key).orderBy("day"))
    return (
        df.dropna(subset=key)
        .select(F.col(day_column).alias("day"), *key)
        .withColumn("_first_of_key", first)
        .where(F.col("_first_of_key") == 1)
        .groupBy("day")
        .agg(F.count(F.lit(1)).alias("distinct_keys"))
    )


def day_fingerprints(df: DataFrame, day_column: str) -> DataFrame:
    """Per day: rows and the fingerprint of the day's rows, the one the checks record."""
    return (
        df.groupBy(F.col(day_column).alias("day"))
        .agg(F.count(F.lit(1)).alias("rows"), *_hash_part_sums(df))
        .select("day", "rows", _fingerprint(F.col("rows")).alias("fingerprint"))
    )


def day_contents(df: DataFrame, day_column: str) -> dict[date, DayContent]:
    """day -> rows and fingerprint of `df`'s rows: the same fingerprint the checks record."""
    return {r.day: DayContent(r.rows, r.fingerprint) for r in day_fingerprints(df, day_column).collect()}


def duplicate_samples(df: DataFrame, key: list[str], day_column: str, days: list[date]) -> dict[date, list[str]]:
    dups = df.where(F.col(day_column).isin(days)).groupBy(day_column, *key).count().where("count > 1").collect()
    samples: dict[date, list[str]] = {}
    for r in dups:
        keys = samples.setdefault(r[day_column], [])
        if len(keys) < SAMPLE_SIZE:
            keys.append(", ".join(f"{k}={r[k]}" for k in key))
    return samples


def _measure(name: str) -> str:
    return f"_measure_{name}"


def _figure(name: str, index: int) -> str:
    """The aggregate column of a user check's figure: apart from the profile's own columns, whatever it is called."""
    return f"_check{index}_{name}"


def _for_downstream(downstream: str, name: str) -> str:
    """The aggregate column of a downstream table's upstream measure, apart from this table's own columns."""
    return f"_for_{downstream}_{name}"


def _user_figures(table: Declared) -> list[tuple[str, Column]]:
    return [
        (_figure(name, i), F.expr(sql)) for i, check in enumerate(table.checks) for name, sql in check.figures.items()
    ]


def _metadata_value(value: Any) -> Any:
    """A figure as Dagster metadata takes it."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    return value


def _user_outcomes(table: Declared, figures: Mapping[date, Mapping[str, Any]], days: list[date]) -> list[Outcome]:
    """Each user check on each day, from the day's figures (the figures of no rows on a day without any)."""
    outcomes = []
    for i, check in enumerate(table.checks):
        for day in days:
            values = {name: figures[day][_figure(name, i)] for name in check.figures}
            try:
                passed, why = bool(check.passes(values)), ""
            except Exception as e:  # the user's function failing on a day's figures fails the check, saying why
                passed, why = False, f"{type(e).__name__}: {e}"
            metadata = {name: _metadata_value(v) if v is not None else "none" for name, v in values.items()}
            outcomes.append(
                Outcome(check.name, day, passed, {**metadata, **({ERROR: why} if why else {})}, check.blocking)
            )
    return outcomes


def evaluate_blocking(
    df: DataFrame,
    upstream: DataFrame | None,
    lost: DataFrame | None,
    table: Declared,
    days: list[date],
    upstream_day: str | None = None,
    downstream: Mapping[str, Reconcile] | None = None,
    upstream_measures: Mapping[date, Mapping[str, Any]] | None = None,
) -> Verified:
    """The checks a change runs before it writes, for each of `days` on `df`, a table's rows: its key unique and not
    null, its measures equal to `upstream`'s (when it reconciles; its rows by `upstream_day`, by default the table's
    day column), no key in `lost` (when it checks nothing is lost), and the user's checks.

    A table reconciling with this one may have its upstream measures computed here, in the same pass over the rows
    (`downstream`: table -> its reconciliation; in `Verified.for_downstream`), and handed to its own evaluation as
    `upstream_measures` (day -> measure -> value), instead of `upstream`'s rows aggregated again.

    The user's checks are set apart when their figures cannot be computed (a figure whose SQL does not resolve, or
    that raises): the built-in checks are evaluated without them, and each of the user's fails on every day, saying
    why."""
    key, day_column = list(table.key), table.day_column
    rec = table.reconcile
    # Measures by a column name of their own, apart from the profile's (a measure may be called "rows").
    this_measures = [(_measure(name), F.expr(m.aggregate)) for name, m in rec.measures.items()] if rec else []
    theirs_here = [
        (_for_downstream(other, name), F.expr(m.upstream_aggregate))
        for other, their_rec in (downstream or {}).items()
        for name, m in their_rec.measures.items()
    ]
    user_error: Exception | None = None
    try:
        user = _user_figures(table)
        rows = _day_profile(df, key, day_column, [*this_measures, *theirs_here, *user]).collect()
    except Exception as error:
        if not table.checks:
            raise
        user, user_error = [], error
        rows = _day_profile(df, key, day_column, [*this_measures, *theirs_here]).collect()
    profiles = {
        r.day: DayProfile(
            r.rows,
            r.distinct_keys,
            r.null_key_rows or 0,
            r.fingerprint,
            {name: r[_measure(name)] for name in (rec.measures if rec else {})},
        )
        for r in rows
    }
    verified = Verified([], profiles)
    verified.for_downstream = {
        other: {r.day: {name: r[_for_downstream(other, name)] for name in their_rec.measures} for r in rows}
        for other, their_rec in (downstream or {}).items()
    }
    failing_unique = [d for d, p in profiles.items() if p.duplicate_rows]
    samples = duplicate_samples(df, key, day_column, failing_unique) if failing_unique else {}
    for day in days:
        p = verified.profile(day)
        verified.outcomes.append(
            Outcome(
                UNIQUE_KEY,
                day,
                p.duplicate_rows == 0,
                {
                    "rows": p.rows,
                    "duplicate_rows": p.duplicate_rows,
                    "duplicate_per_1k": p.duplicate_per_1k,
                    "sample_duplicate_keys": "; ".join(samples.get(day, [])),
                },
            )
        )
        verified.outcomes.append(
            Outcome(KEYS_NOT_NULL, day, p.null_key_rows == 0, {"null_key_rows": p.null_key_rows, "key": ", ".join(key)})
        )

    if rec and (upstream is not None or upstream_measures is not None):
        up_profile: Mapping[date, Mapping[str, Any]] = (
            upstream_measures
            if upstream_measures is not None
            else {
                r.day: r.asDict()
                for r in upstream.groupBy(F.col(upstream_day or day_column).alias("day"))  # type: ignore[union-attr]
                .agg(*[F.expr(m.upstream_aggregate).alias(name) for name, m in rec.measures.items()])
                .collect()
            }
        )
        differing: dict[date, dict[str, tuple[str, str]]] = {}
        for day in days:
            theirs = up_profile.get(day)
            for name in rec.measures:
                a = verified.profile(day).measures.get(name) or 0
                b = (theirs[name] if theirs else None) or 0
                if a != b:
                    differing.setdefault(day, {})[name] = (str(a), str(b))
        verified.mismatches = {day: len(diff) for day, diff in differing.items()}
        for day in days:
            diff = differing.get(day, {})
            verified.outcomes.append(
                Outcome(
                    RECONCILES,
                    day,
                    not diff,
                    {
                        "upstream": rec.upstream,
                        "mismatch_count": len(diff),
                        "mismatches": ", ".join(f"{m}: {mine} vs {theirs}" for m, (mine, theirs) in diff.items()),
                        "mismatching_days_in_run": len(differing),
                    },
                )
            )

    if lost is not None:
        lost_by_day: dict[date, list] = {}
        for r in lost.collect():
            lost_by_day.setdefault(r.day, []).append(r)
        for day in days:
            missing = lost_by_day.get(day, [])
            verified.outcomes.append(
                Outcome(
                    NOTHING_LOST,
                    day,
                    not missing,
                    {
                        "missing_keys": len(missing),
                        "sample_missing_keys": "; ".join(
                            ", ".join(f"{k}={m[k]}" for k in key) for m in missing[:SAMPLE_SIZE]
                        ),
                    },
                )
            )
    if user_error is not None:
        blocking = [c.name for c in table.checks if c.blocking]
        verified.outcomes += not_evaluated([c.name for c in table.checks], days, user_error, blocking)
    elif table.checks:
        figures: dict[date, Mapping[str, Any]] = {r.day: r.asDict() for r in rows}
        if any(day not in figures for day in days):  # a day with no rows: the figures of no rows
            empty = df.limit(0).agg(*[column.alias(name) for name, column in user]).first()
            figures.update({day: empty.asDict() if empty else {} for day in days if day not in figures})
        verified.outcomes += _user_outcomes(table, figures, days)
    return verified


def not_evaluated(
    check_names: list[str], days: list[date], error: BaseException, blocking: Sequence[str] = ()
) -> list[Outcome]:
    """Checks that could not be evaluated on `days`: failed on each day, saying why. A check that did not run never
    passes."""
    why = f"could not be evaluated: {error_line(error)}"
    return [
        Outcome(name, day, False, {ERROR: why, "evaluated": False}, name in blocking)
        for name in check_names
        for day in days
    ]


def error_line(error: BaseException) -> str:
    """An error as one line: its class and the first line of its message (Spark's carry a long plan after it)."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def summary(o: Outcome) -> str:
    """One line a person can act on: the numbers that made the check fail (a user check's: its figures)."""
    if o.metadata.get("evaluated") is False:
        return str(o.metadata[ERROR])
    keys = (
        "duplicate_rows",
        "sample_duplicate_keys",
        "null_key_rows",
        "mismatches",
        "missing_keys",
        "sample_missing_keys",
        "rows",
        "previous_rows",
        "relative_change",
        "refused_files",
    )
    if o.check not in BUILT_IN:  # a user check: every figure, zeros too
        return ", ".join(f"{k}={v}" for k, v in o.metadata.items())
    return ", ".join(f"{k}={o.metadata[k]}" for k in keys if o.metadata.get(k) not in (None, "", 0))


def _row_count_change(day: date, rows: int, previous_rows: int | None, tolerance: float) -> Outcome:
    change = None if not previous_rows else abs(rows - previous_rows) / previous_rows
    return Outcome(
        ROW_COUNT_CHANGE,
        day,
        change is None or change <= tolerance,
        {
            "rows": rows,
            "previous_rows": previous_rows if previous_rows is not None else -1,
            "relative_change": round(change, 4) if change is not None else 0.0,
            "tolerance": tolerance,
        },
    )


def fingerprint_changed(now: DayContent, previous: DayContent | None) -> bool:
    return previous is not None and previous.fingerprint is not None and previous.fingerprint != now.fingerprint


def evaluate_after_commit(verified: Verified, previous: Mapping[date, DayContent], days: list[date]) -> list[Outcome]:
    """Fingerprint and row-count change against each day's previous materialization."""
    tolerance = row_count_tolerance()
    outcomes = []
    for day in days:
        now, before = verified.profile(day).content, previous.get(day)
        outcomes.append(
            Outcome(
                FINGERPRINT,
                day,
                True,
                {
                    "fingerprint": now.fingerprint or "",
                    "previous_fingerprint": before.fingerprint or "" if before else "",
                    "changed": fingerprint_changed(now, before),
                },
            )
        )
        outcomes.append(_row_count_change(day, now.rows, before.rows if before else None, tolerance))
    return outcomes


def evaluate_published(verified: Verified, recorded: Mapping[date, DayContent], days: list[date]) -> list[Outcome]:
    """Fingerprint and row count of what is published, against what the pipeline last wrote (`recorded`)."""
    tolerance = row_count_tolerance()
    outcomes = []
    for day in days:
        now, written = verified.profile(day).content, recorded.get(day)
        outcomes.append(
            Outcome(
                FINGERPRINT,
                day,
                not fingerprint_changed(now, written),
                {
                    "fingerprint": now.fingerprint or "",
                    "fingerprint_written": written.fingerprint or "" if written else "",
                    "changed_since_written": fingerprint_changed(now, written),
                },
            )
        )
        outcomes.append(_row_count_change(day, now.rows, written.rows if written else None, tolerance))
    return outcomes
