"""Verifying: every blocking check of every table on every day, before anything is written. One failing day and
nothing at all is written (reconcile before publish, across the graph): `Refused`. Nor is anything written when a
table's shape (its columns, its key) would change over some of its days only: `ShapeChangeRefused`."""

from concurrent.futures import Future
from datetime import date

from exact_backfills import checks
from exact_backfills.builds import Staged
from exact_backfills.declare import Declared, Pipeline, Reconcile
from exact_backfills.write_path.changes import Change, Refused
from exact_backfills.write_path.commit import side_rows
from exact_backfills.write_path.context import Writing
from resources.delta_io import refuse_partial_reshape


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
    for table in w.change.tables():
        _keeps_shape_or_replaces_every_day(w, table)


def _keeps_shape_or_replaces_every_day(w: Writing, table: str) -> None:
    """ShapeChangeRefused when the table (or a side table) would change shape on some of its days only: asked of each
    before the first commit, since each commit asks only of its own table."""
    days, key = w.change.days[table], w.pipeline.by_name[table].key
    refuse_partial_reshape(w.spark, table, w.pipeline.day_columns[table], days, w.staged[table].table.schema, key)
    for side, rows in side_rows(w, table).items():
        refuse_partial_reshape(w.spark, side, w.pipeline.day_columns[side], days, rows.schema, None)


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
