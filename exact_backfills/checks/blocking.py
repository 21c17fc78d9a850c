"""The checks a change runs before it writes, on every day of its rows at once: the keys, the reconciliation with the
upstream, nothing lost, and the user's checks, from one pass over the rows grouped by day (the profile)."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from exact_backfills.checks import keys, nothing_lost, reconcile, user
from exact_backfills.checks.base import Outcome
from exact_backfills.checks.profile import DayProfile, Verified, day_profile, duplicate_samples
from exact_backfills.declare import Declared, Reconcile
from resources.delta_io import read_days, table_exists


@dataclass(frozen=True)
class Upstream:
    """What a table reconciles with: its upstream's rows (by their day column), or the upstream's measures of each
    day as the upstream's own checks computed them (`Verified.for_downstream`), not aggregated again."""

    rows: DataFrame | None = None
    day_column: str | None = None
    measures: reconcile.Measures | None = None


def _measure(name: str) -> str:
    return f"_measure_{name}"


def _for_downstream(downstream: str, name: str) -> str:
    """The aggregate column of a downstream table's upstream measure, apart from this table's own columns."""
    return f"_for_{downstream}_{name}"


def _measure_columns(table: Declared, downstream: Mapping[str, Reconcile]) -> list[tuple[str, Column]]:
    """This table's side of its reconciliation, and the upstream side of each table reconciling with it, each by a
    column name of its own, apart from the profile's (a measure may be called "rows")."""
    rec = table.reconcile
    mine = [(_measure(name), F.expr(m.aggregate)) for name, m in rec.measures.items()] if rec else []
    theirs = [
        (_for_downstream(other, name), F.expr(m.upstream_aggregate))
        for other, their_rec in downstream.items()
        for name, m in their_rec.measures.items()
    ]
    return [*mine, *theirs]


def _profile_rows(
    df: DataFrame, table: Declared, measures: list[tuple[str, Column]]
) -> tuple[list[Row], Exception | None]:
    """The profile of each day; the user's figures set apart (with why) when they cannot be computed."""
    key = list(table.key)
    try:
        return day_profile(df, key, table.day_column, [*measures, *user.figure_columns(table)]).collect(), None
    except Exception as error:
        if not table.checks:
            raise
        return day_profile(df, key, table.day_column, measures).collect(), error


def _verified(rows: list[Row], table: Declared, downstream: Mapping[str, Reconcile]) -> Verified:
    measures = table.reconcile.measures if table.reconcile else {}
    profiles = {
        r.day: DayProfile(
            r.rows, r.distinct_keys, r.null_key_rows or 0, r.fingerprint, {n: r[_measure(n)] for n in measures}
        )
        for r in rows
    }
    verified = Verified([], profiles)
    verified.for_downstream = {
        other: {r.day: {name: r[_for_downstream(other, name)] for name in their.measures} for r in rows}
        for other, their in downstream.items()
    }
    return verified


def _key_outcomes(df: DataFrame, table: Declared, verified: Verified, days: list[date]) -> list[Outcome]:
    key = list(table.key)
    failing = [d for d, p in verified.profiles.items() if p.duplicate_rows]
    samples = duplicate_samples(df, key, table.day_column, failing) if failing else {}
    return [
        o
        for day in days
        for o in (
            keys.unique_key(day, verified.profile(day), samples.get(day, [])),
            keys.keys_not_null(day, verified.profile(day), key),
        )
    ]


def _reconcile_outcomes(verified: Verified, rec: Reconcile, upstream: Upstream, days: list[date]) -> list[Outcome]:
    """reconciles_with_upstream on each day; the day's mismatch count kept in `verified` for the audit."""
    # The measures handed by the upstream's own checks cover its change's days, not always a window's days before.
    theirs = upstream.measures if rec.window_days == 1 or upstream.rows is None else None
    if theirs is None and upstream.rows is not None:
        theirs = reconcile.upstream_measures(rec, upstream.rows, upstream.day_column or "")
    theirs = reconcile.over_window(rec, theirs or {}, days)
    found = {day: reconcile.differing(rec, verified.profile(day), (theirs or {}).get(day)) for day in days}
    differing = {day: diff for day, diff in found.items() if diff}
    verified.mismatches = {day: len(diff) for day, diff in differing.items()}
    return [reconcile.reconciles(day, rec, found[day], len(differing)) for day in days]


def _user_outcomes(df: DataFrame, table: Declared, rows: list[Row], days: list[date]) -> list[Outcome]:
    figures: dict[date, Mapping[str, Any]] = {r.day: r.asDict() for r in rows}
    if any(day not in figures for day in days):  # a day with no rows: the figures of no rows
        empty = df.limit(0).agg(*[column.alias(name) for name, column in user.figure_columns(table)]).first()
        figures.update({day: empty.asDict() if empty else {} for day in days if day not in figures})
    before = user.compares_days_before(table, days)
    return user.outcomes(table, {**_published_figures(df, table, before), **figures}, days)


def _published_figures(df: DataFrame, table: Declared, days: list[date]) -> dict[date, Mapping[str, Any]]:
    """The user's figures of what is published on `days` (none before the table is first written)."""
    if not days or not table_exists(table.name):
        return {}
    published = read_days(df.sparkSession, table.name, table.day_column, days)
    columns = [column.alias(name) for name, column in user.figure_columns(table)]
    return {r.day: r.asDict() for r in published.groupBy(F.col(table.day_column).alias("day")).agg(*columns).collect()}


def evaluate_blocking(
    df: DataFrame,
    table: Declared,
    days: list[date],
    upstream: Upstream | None = None,
    lost: DataFrame | None = None,
    downstream: Mapping[str, Reconcile] | None = None,
) -> Verified:
    """The checks a change runs before it writes, for each of `days` on `df`, a table's rows: its key unique and not
    null, its measures equal to `upstream`'s (when it reconciles), no key in `lost` (when it checks nothing is lost),
    and the user's checks.

    A table reconciling with this one may have its upstream measures computed here, in the same pass over the rows
    (`downstream`: table -> its reconciliation; in `Verified.for_downstream`), and handed to its own evaluation as
    `Upstream(measures=...)` instead of the upstream's rows aggregated again.

    The user's checks are set apart when their figures cannot be computed (a figure whose SQL does not resolve, or
    that raises): the built-in checks are evaluated without them, and each of the user's fails on every day, saying
    why."""
    downstream = downstream or {}
    rows, user_error = _profile_rows(df, table, _measure_columns(table, downstream))
    verified = _verified(rows, table, downstream)
    verified.outcomes += _key_outcomes(df, table, verified, days)
    if table.reconcile and upstream is not None and (upstream.rows is not None or upstream.measures is not None):
        verified.outcomes += _reconcile_outcomes(verified, table.reconcile, upstream, days)
    if lost is not None:
        verified.outcomes += nothing_lost.outcomes(lost, list(table.key), days)
    if user_error is not None:
        verified.outcomes += [user.check_of(c).not_evaluated(d, user_error) for c in table.checks for d in days]
    elif table.checks:
        verified.outcomes += _user_outcomes(df, table, rows, days)
    return verified
