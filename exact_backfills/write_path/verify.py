"""Verifying: every blocking check of every table on every day, before anything is written. One failing day and
nothing at all is written (reconcile before publish, across the graph): `Refused`."""

from concurrent.futures import Future
from datetime import date

from exact_backfills import checks
from exact_backfills.builds import Staged
from exact_backfills.declare import Declared, Pipeline, Reconcile
from exact_backfills.write_path.changes import Change, Refused
from exact_backfills.write_path.context import Writing


def check(w: Writing, table: str) -> None:
    """The table's blocking checks, submitted to the change's threads. A change of many days checks one table after
    another: a table's upstream measures then come from the upstream's pass. A few days' tables are checked at once,
    each on its own, none waiting for another."""
    downstream = {d: rec for d, rec in w.reconciled.items() if rec.upstream == table}
    upstream = w.checking[w.reconciled[table].upstream] if table in w.reconciled else None
    spec, days = w.pipeline.by_name[table], w.change.days[table]
    w.checking[table] = w.pool.submit(_verify, w.staged[table], spec, days, downstream, upstream)


def verify(w: Writing) -> None:
    """Every table's checks once done; Refused when a blocking check failed on any table's day."""
    w.verified = {table: w.checking[table].result() for table in w.change.tables()}
    failing = {table: v.failing for table, v in w.verified.items() if v.failing}
    if failing:
        raise Refused(w.change, failing)


def reconciled_within(pipeline: Pipeline, change: Change) -> dict[str, Reconcile]:
    """table -> its reconciliation, for each table of `change` whose upstream the change stages on every one of its
    days: the upstream's measures are then computed in the same pass as the upstream's own checks, over the rows the
    table reads, rather than in a pass of their own."""
    found = {}
    for name in change.tables():
        rec = pipeline.by_name[name].reconcile
        if rec and rec.upstream in change.days and set(change.days[name]) <= set(change.days[rec.upstream]):
            found[name] = rec
    return found


def _verify(
    built: Staged,
    table: Declared,
    days: list[date],
    downstream: dict[str, Reconcile],
    upstream: Future[checks.Verified] | None,
) -> checks.Verified:
    """The table's blocking checks; the measures of the tables reconciling with it (`downstream`) computed with them,
    its upstream's measures taken from the upstream's checks when those computed them (`upstream`, submitted first)."""
    measures = upstream.result().for_downstream[table.name] if upstream is not None else None
    upstream_rows = checks.Upstream(built.upstream, built.upstream_day, measures)
    return checks.evaluate_blocking(built.table, table, days, upstream_rows, built.lost, downstream)
