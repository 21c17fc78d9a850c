"""A code change as a plan: build beside, publish nothing, compare day by day; then promote exactly the changed days.

`make_plan` rebuilds, with the code loaded now, the days each table's older code built (in a range, for the tables
chosen) into shadow tables under warehouse/_plans/<plan_id>/, which readers never see. Each table reads its upstream
through an overlay: the plan's own rows for the days it found changed, the published table pinned at the Delta
version the plan started from for the rest. Every blocking check runs on the shadow rows. Then, per table and day, the
shadow is compared with what is published: rows added, removed and changed by natural key, the columns that changed,
each measure's total before and after, fingerprints before and after. A day whose content is unchanged is marked so,
and the days downstream of unchanged days only are not rebuilt at all (early cutoff).

`promote` writes the changed days from the shadow through the one write path (publish.py: one commit per table,
whole graph or nothing) and records the unchanged days as current under the new code without
rewriting them. It is refused, naming what, when a published table moved since the plan pinned it, a blocking check
failed in the shadow, or the code loaded is not the code the plan was built with."""

import json
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from exact_backfills import builds, checks, clock, code_versions, contract_changes
from exact_backfills.builds import RowsOfDays
from exact_backfills.calendar import Partitions
from exact_backfills.declare import Declared, Pipeline, Staging
from exact_backfills.dependencies import CodeChange
from exact_backfills.key_changes import KeyChange, key_change, whole_rows_diff
from exact_backfills.partitions import days as day_range
from exact_backfills.pipelines import command
from exact_backfills.publish import day_ranges
from exact_backfills.retirement import no_longer_declared
from exact_backfills.verification import stale_code_days
from exact_backfills.write_path.staging import overlay
from resources import audit, control
from resources.audit import DayContent
from resources.delta_io import SchemaDiff, current_version, read_path, write_new_table
from resources.lake import shadow_path, table_path

_NUMERIC = (T.DecimalType, T.LongType, T.IntegerType, T.DoubleType, T.ShortType)


@dataclass(frozen=True)
class DayFigures:
    """A changed day of a table: its rows and fingerprint published now and in the plan."""

    day: date
    before: DayContent
    after: DayContent


@dataclass
class TablePlan:
    """What the plan found in one table."""

    code_before: str  # the version(s) that built the days it rebuilt
    code_after: str
    changed_days: list[date]
    unchanged_days: list[date]
    rows_added: int = 0
    rows_removed: int = 0
    rows_changed: int = 0
    changed_columns: dict[str, int] = field(default_factory=dict)  # column -> rows whose value changed
    measures: dict[str, tuple[str, str]] = field(default_factory=dict)  # column -> its total (before, after)
    days: list[DayFigures] = field(default_factory=list)  # the changed days' figures
    schema: SchemaDiff = field(default_factory=SchemaDiff)  # how its columns change
    key: KeyChange | None = None  # how its natural key changes

    @property
    def reshaped(self) -> str:
        """How its shape (columns, key) changes, '' when it keeps it: a change of shape rewrites every day."""
        said = [f"columns change ({self.schema.describe()})"] if self.schema else []
        return "; ".join(said + ([self.key.describe()] if self.key else []))


@dataclass(frozen=True)
class BlockingFailure:
    table: str
    check: str
    day: date
    summary: str


@dataclass
class Plan:
    plan_id: str
    created_at: datetime
    start: date
    end: date
    code_versions: dict[str, str]  # every table's, when the plan was built
    pinned: dict[str, int | None]  # every table's published Delta version the plan read
    tables: dict[str, TablePlan]  # the tables it rebuilt days of, in publish order
    blocking_failures: list[BlockingFailure]
    # Why it cannot be promoted although every check passed, one line each: a change of shape over some days only.
    refusals: list[str] = field(default_factory=list)
    # Tables it published and no longer declares: left as they are (`retire` archives or drops one).
    undeclared: list[str] = field(default_factory=list)

    @property
    def promotable(self) -> bool:
        return not self.blocking_failures and not self.refusals

    def to_json(self) -> dict[str, Any]:
        """The plan as the interface gives it (`plan --json`)."""
        return {
            "plan_id": self.plan_id,
            "created_at": self.created_at.isoformat(),
            "range": [self.start.isoformat(), self.end.isoformat()],
            "promotable": self.promotable,
            "tables": {
                t: {
                    "code_version": {"before": p.code_before, "after": p.code_after},
                    "changed_days": [d.isoformat() for d in p.changed_days],
                    "unchanged_days": [d.isoformat() for d in p.unchanged_days],
                    "rows_added": p.rows_added,
                    "rows_removed": p.rows_removed,
                    "rows_changed": p.rows_changed,
                    "changed_columns": p.changed_columns,
                    "schema": p.schema.to_json(),
                    "key": p.key.to_json() if p.key else None,
                    "measures": {m: {"before": b, "after": a} for m, (b, a) in p.measures.items()},
                    "days": {
                        f.day.isoformat(): {
                            "rows_before": f.before.rows,
                            "rows_after": f.after.rows,
                            "fingerprint_before": f.before.fingerprint,
                            "fingerprint_after": f.after.fingerprint,
                        }
                        for f in p.days
                    },
                }
                for t, p in self.tables.items()
            },
            "blocking_failures": [
                {"table": f.table, "check": f.check, "day": f.day.isoformat(), "summary": f.summary}
                for f in self.blocking_failures
            ],
            "refusals": self.refusals,
            "undeclared": self.undeclared,
            "code_versions": self.code_versions,
            "pinned": self.pinned,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "Plan":
        def figures(day: str, f: dict[str, Any]) -> DayFigures:
            return DayFigures(
                date.fromisoformat(day),
                DayContent(f["rows_before"], f["fingerprint_before"]),
                DayContent(f["rows_after"], f["fingerprint_after"]),
            )

        tables = {
            t: TablePlan(
                p["code_version"]["before"],
                p["code_version"]["after"],
                [date.fromisoformat(d) for d in p["changed_days"]],
                [date.fromisoformat(d) for d in p["unchanged_days"]],
                p["rows_added"],
                p["rows_removed"],
                p["rows_changed"],
                p["changed_columns"],
                {m: (v["before"], v["after"]) for m, v in p["measures"].items()},
                [figures(day, f) for day, f in p["days"].items()],
                SchemaDiff.from_json(p.get("schema")),
                KeyChange.from_json(p.get("key")),
            )
            for t, p in doc["tables"].items()
        }
        failures = [
            BlockingFailure(f["table"], f["check"], date.fromisoformat(f["day"]), f["summary"])
            for f in doc["blocking_failures"]
        ]
        start, end = (date.fromisoformat(d) for d in doc["range"])
        return cls(
            doc["plan_id"],
            datetime.fromisoformat(doc["created_at"]),
            start,
            end,
            doc["code_versions"],
            doc["pinned"],
            tables,
            failures,
            doc.get("refusals", []),
            doc.get("undeclared", []),
        )

    def markdown(self, table: str) -> str:
        """The days that change in one table, as a Markdown table (the plan job's metadata)."""
        p = self.tables[table]
        lines = [
            f"{table}: code {p.code_before} → {p.code_after}; {len(p.changed_days)} day(s) change, "
            f"{len(p.unchanged_days)} unchanged; rows added {p.rows_added}, removed {p.rows_removed}, "
            f"changed {p.rows_changed}",
            *(["", f"columns: {p.schema.describe()}"] if p.schema else []),
            *(["", p.key.describe()] if p.key else []),
            "",
            "| day | rows before | rows after | fingerprint before | fingerprint after |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {f.day} | {f.before.rows} | {f.after.rows} | {(f.before.fingerprint or '-')[:12]} | "
            f"{(f.after.fingerprint or '-')[:12]} |"
            for f in p.days
        ]
        return "\n".join(lines)


class PlanRefused(RuntimeError):
    """A plan that cannot be promoted: nothing was written."""


def _days_to_rebuild(
    table: Declared, own: set[date], changed: dict[str, list[date]], published: set[date], partitions: Partitions
) -> list[date]:
    """A table's days a plan rebuilds: those its own older code built, and those built from days the plan found
    changed upstream, through the day dependency on it (the same days, a trailing window's, or every later day of a
    dimension read as of the day)."""
    found: set[date] = set()
    for upstream, dependency in table.upstream.items():
        days = changed.get(upstream)
        if not days:
            continue
        found |= set(dependency.downstream_of(days, partitions.first_day, partitions.last_day)) & published
    return sorted(own | found)


def _overlay(
    spark: SparkSession,
    pipeline: Pipeline,
    plan_id: str,
    changed: dict[str, list[date]],
    pinned: dict[str, int | None],
) -> RowsOfDays:
    """What a table of the plan reads of an upstream table: the plan's rows on the days it changed them, the
    published rows as of the pinned version elsewhere."""

    def shadow(upstream: str, days: list[date]) -> DataFrame:
        return read_path(spark, shadow_path(plan_id, upstream), pipeline.day_columns[upstream], days)

    def published(upstream: str, days: list[date]) -> DataFrame:
        return read_path(spark, table_path(upstream), pipeline.day_columns[upstream], days, pinned[upstream])

    return overlay(changed, shadow, published, across_code_versions=True)


def day_diff(table: Declared, before: DataFrame, after: DataFrame, days: list[date], plan: TablePlan) -> None:
    """Fill `plan` with how `after` (the shadow) differs from `before` (published) on `days`, day by day."""
    column = table.day_column
    contents = checks.day_contents_of({"before": (before, column), "after": (after, column)})
    was, now = contents["before"], contents["after"]
    none = DayContent(0, None)
    # A change of shape changes every day, even where its values read the same (a widened type, another key).
    plan.changed_days = [d for d in days if plan.reshaped or was.get(d, none) != now.get(d, none)]
    plan.unchanged_days = [d for d in days if d not in plan.changed_days]
    plan.days = [DayFigures(d, was.get(d, none), now.get(d, none)) for d in plan.changed_days]
    if not plan.changed_days:
        return
    key = list(dict.fromkeys([*table.key, column]))
    shared = [c for c in after.columns if c in before.columns and c not in key and c != "run_id"]
    old = before.where(F.col(column).isin(plan.changed_days))
    new = after.where(F.col(column).isin(plan.changed_days))
    if plan.key:  # old rows may lack the new key's columns, or repeat it: compared whole, none "changed"
        whole = [c for c in after.columns if c in before.columns and c != "run_id"]
        plan.rows_added, plan.rows_removed = whole_rows_diff(old, new, whole)
    else:
        _keyed_diff(old, new, key, shared, plan)
    plan.measures = _measures(table, old, new, shared) | _reshaped_measures(old, new, plan.schema)


def _keyed_diff(old: DataFrame, new: DataFrame, key: list[str], shared: list[str], plan: TablePlan) -> None:
    """Rows added, removed and changed by natural key, and per column the rows whose value changed."""
    # A column added, dropped or retyped changes every row the day keeps: counted as changed in that column.
    reshaped = [*plan.schema.added, *plan.schema.dropped, *plan.schema.retyped]
    joined = new.select(*key, *[F.col(c).alias(f"a_{c}") for c in shared], F.lit(True).alias("_a")).join(
        old.select(*key, *[F.col(c).alias(f"b_{c}") for c in shared], F.lit(True).alias("_b")), key, "full_outer"
    )
    both = F.col("_a").isNotNull() & F.col("_b").isNotNull()
    differs = {c: both & ~F.col(f"a_{c}").eqNullSafe(F.col(f"b_{c}")) for c in shared}
    differs |= {c: both for c in reshaped}
    any_differs = F.lit(False)
    for d in differs.values():
        any_differs = any_differs | d
    totals = joined.agg(
        F.sum(F.col("_b").isNull().cast("long")).alias("added"),
        F.sum(F.col("_a").isNull().cast("long")).alias("removed"),
        F.sum(any_differs.cast("long")).alias("changed"),
        *[F.sum(d.cast("long")).alias(f"c_{c}") for c, d in differs.items()],
    ).first()
    assert totals is not None
    plan.rows_added, plan.rows_removed, plan.rows_changed = totals.added or 0, totals.removed or 0, totals.changed or 0
    plan.changed_columns = {c: totals[f"c_{c}"] for c in differs if totals[f"c_{c}"]}


def _reshaped_measures(old: DataFrame, new: DataFrame, shape: SchemaDiff) -> dict[str, tuple[str, str]]:
    """The total of each numeric column added (before: none) or dropped (after: none) over the changed days."""
    numeric = {f.name for df in (old, new) for f in df.schema.fields if isinstance(f.dataType, _NUMERIC)}
    found: dict[str, tuple[str, str]] = {}
    for side, columns in ((new, shape.added), (old, shape.dropped)):
        summed = [c for c in columns if c in numeric]
        if summed:
            row = side.agg(*[_total(side, c).alias(c) for c in summed]).first()
            assert row is not None
            found |= {c: ("-", str(row[c])) if side is new else (str(row[c]), "-") for c in summed}
    return found


def _total(rows: DataFrame, column: str) -> Column:
    """A numeric column's total; a whole number's summed as a decimal, since a total of identifiers (a key of large
    numbers) would overflow a long."""
    if isinstance(rows.schema[column].dataType, T.IntegralType):
        return F.sum(F.col(column).cast(T.DecimalType(38, 0)))
    return F.sum(column)


def _measures(table: Declared, old: DataFrame, new: DataFrame, shared: list[str]) -> dict[str, tuple[str, str]]:
    """Each measure's total over the changed days, before and after: every measure the table declares it reconciles
    (whether it moved or not), then each other numeric column whose sum moved."""
    declared = {name: F.expr(m.aggregate) for name, m in table.reconcile.measures.items()} if table.reconcile else {}
    columns = [f.name for f in new.schema.fields if f.name in shared and isinstance(f.dataType, _NUMERIC)]
    names = [*declared, *(c for c in columns if c not in declared)]
    if not names:
        return {}

    def totals_of(df: DataFrame) -> Any:  # each side's own types decide how a column is summed (it may be retyped)
        return df.agg(
            *[(declared[n] if n in declared else _total(df, n)).alias(f"_m{i}") for i, n in enumerate(names)]
        ).first()

    b, a = totals_of(old), totals_of(new)
    assert b is not None and a is not None
    totals = {name: (b[f"_m{i}"], a[f"_m{i}"]) for i, name in enumerate(names)}
    return {m: (str(x), str(y)) for m, (x, y) in totals.items() if m in declared or x != y}


def reshape_refusals(table: str, plan: TablePlan, days: list[date], published: list[date]) -> list[str]:
    """Why a change of a table's shape (its columns, its key) planned over some of its days cannot be promoted: it
    replaces every day."""
    left = [d for d in published if d not in set(days)]
    if not plan.reshaped or not left:
        return []
    return [
        f"{table}'s {plan.reshaped}: a change of shape rewrites every day of the table, and this plan covers "
        f"{len(published) - len(left)} of its {len(published)} day(s); plan --start {published[0]} "
        f"--end {published[-1]}"
    ]


def make_plan(spark: SparkSession, pipeline: Pipeline, start: date, end: date, select: list[str] | None = None) -> Plan:
    """Build a plan for the code loaded now over start..end (for the chosen tables and those built from them), record
    it, and return it. Nothing published changes."""
    versions = code_versions.current(pipeline)
    stale: dict[str, dict[date, CodeChange]] = stale_code_days(spark, pipeline)
    written = audit.built_by(spark, pipeline.name)
    in_range = set(day_range(start, end))
    chosen = set(pipeline.downstream(set(select))) if select else set(pipeline.publish_order)
    undeclared = [u.table for u in no_longer_declared(pipeline, written)]
    plan = Plan(
        uuid.uuid4().hex[:8],
        clock.now(),
        start,
        end,
        versions,
        {t: current_version(spark, t) for t in pipeline.every_table},
        {},
        [],
        undeclared=undeclared,
    )
    # A staging table's contract is part of its code: only a staging table stale by its own code may have a new one.
    for staging in (t for t in pipeline.tables if isinstance(t, Staging) and t.name in chosen):
        contract_changed = any(why.table == staging.name for why in stale.get(staging.name, {}).values())
        if contract_changed and (files := contract_changes.newly_refused(spark, staging)):
            plan.refusals.append(contract_changes.describe(staging, files))
    changed: dict[str, list[date]] = {}
    read = _overlay(spark, pipeline, plan.plan_id, changed, plan.pinned)
    for name in [t for t in pipeline.publish_order if t in chosen]:
        table = pipeline.by_name[name]
        published = set(written.get(name, {})) & in_range
        own = {d for d, why in stale.get(name, {}).items() if why.table == name and d in in_range}
        days = _days_to_rebuild(table, own, changed, published, pipeline.partitions)
        if not days:
            continue
        staged = builds.build(spark, pipeline, table, days, read)
        staged.table = staged.table.persist()  # checked and written from the same computed rows, as publish does
        try:
            upstream = checks.Upstream(staged.upstream, staged.upstream_day)
            verified = checks.evaluate_blocking(staged.table, table, days, upstream, staged.lost)
            plan.blocking_failures += [
                BlockingFailure(name, o.check, o.day, checks.summary(o)) for o in verified.failing
            ]
            write_new_table(staged.table, shadow_path(plan.plan_id, name), table.day_column)
            for side in table.side_tables:
                write_new_table(staged.side_tables[side.name], shadow_path(plan.plan_id, side.name), side.day_column)
        finally:
            staged.unpersist()
        built_by = sorted({str(written.get(name, {}).get(d) or "unrecorded") for d in days})
        result = TablePlan(", ".join(built_by), versions[name], [], [])
        after = read_path(spark, shadow_path(plan.plan_id, name), table.day_column, days)
        before = read_path(spark, table_path(name), table.day_column, days, plan.pinned[name])
        result.schema = SchemaDiff.between(before.schema, after.schema)
        result.key = key_change(name, table.key, plan.pinned[name])
        plan.refusals += reshape_refusals(name, result, days, sorted(written.get(name, {})))
        day_diff(table, before, after, days, result)
        plan.tables[name] = result
        changed[name] = result.changed_days
    control.record_plan(spark, pipeline.name, plan.plan_id, json.dumps(plan.to_json()), plan.created_at)
    return plan


def load_plan(spark: SparkSession, pipeline: Pipeline, plan_id: str) -> tuple[Plan, str]:
    """A recorded plan and its status; PlanRefused when there is no such plan."""
    found = control.read_plan(spark, pipeline.name, plan_id)
    if found is None:
        raise PlanRefused(f"no plan {plan_id} in pipeline {pipeline.name}: `{command(pipeline)} plan` builds one")
    document, status = found
    return Plan.from_json(json.loads(document)), status


def version_note(plan: Plan) -> str:
    """What an operator sends once a plan is promoted: per table, the code versions, the days that changed, each
    measure's total before and after, and the rows added, removed and changed."""
    lines = [f"Plan {plan.plan_id} ({plan.start}..{plan.end}), built {plan.created_at:%Y-%m-%d %H:%M} UTC"]
    for table, p in plan.tables.items():
        lines.append(
            f"- {table}: code {p.code_before} → {p.code_after}; {len(p.changed_days)} day(s) changed"
            + (f" ({day_ranges(p.changed_days)})" if p.changed_days else "")
            + f", {len(p.unchanged_days)} unchanged; rows added {p.rows_added}, removed {p.rows_removed}, "
            f"changed {p.rows_changed}"
        )
        shape = [f"columns: {p.schema.describe()}"] if p.schema else []
        for change in [*shape, *([p.key.describe()] if p.key else [])]:
            lines.append(f"  {change} (the whole table is rewritten in one commit)")
        if p.changed_columns:
            lines.append("  columns changed: " + ", ".join(f"{c} ({n} rows)" for c, n in p.changed_columns.items()))
        for measure, (before, after) in p.measures.items():
            lines.append(f"  {measure}: {before} → {after}")
    if not plan.tables:
        lines.append("- nothing to rebuild: every day in the range was built by the code loaded now")
    lines += [
        f"- {t}: no longer declared, left as it is (`retire --table {t}` archives or drops it)" for t in plan.undeclared
    ]
    return "\n".join(lines)
