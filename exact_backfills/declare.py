"""What a daily pipeline declares of itself, and all the machinery knows of it.

A pipeline is one `Pipeline(...)`, assigned to a module attribute: its **sources**, landed under the landing contract
(`$LAKE_ROOT/landing/<source>/ingest_date=D/*.parquet`), and its **tables**, each partitioned by day. A source is
taken into the lake by a `Staging` table, which the machinery builds (each key's current version on its day, or a
dimension's versions by the day they take effect); every other table is a `Table` with a build of the user's, reading
its upstream tables through a **day dependency** each: the same day, a trailing window of days, or a dimension as of
the day. From the declaration the machinery derives the Dagster assets and checks, the order tables are published in,
which days a landed batch or a code change makes stale (through every day dependency), plans, rollback's closure,
the command line's table names and the metrics.

A build reads only what `read` gives it and returns the rows of the days it is given: the write that follows
replaces exactly those days, and Delta refuses a row of any other day."""

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from functools import cached_property
from typing import NamedTuple

from pyspark.sql import DataFrame, SparkSession

from exact_backfills.calendar import Calendar, Partitions, declared_calendar_problems
from exact_backfills.day_checks import Measure as Measure
from exact_backfills.day_checks import Reconcile as Reconcile
from exact_backfills.day_checks import UserCheck, refused_check

# The day dependencies a table declares on its upstream tables, re-exported where a declaration imports them from.
from exact_backfills.day_dependencies import AsOf as AsOf
from exact_backfills.day_dependencies import DayDependency
from exact_backfills.day_dependencies import SameDay as SameDay
from exact_backfills.day_dependencies import TrailingDays as TrailingDays
from exact_backfills.day_dependencies import Window as Window
from exact_backfills.declaration_error import DeclarationError as DeclarationError

# A source and the columns the machinery adds to its rows, re-exported where a declaration imports them from.
from exact_backfills.sources import BATCH_COLUMN as BATCH_COLUMN
from exact_backfills.sources import FILE_COLUMN as FILE_COLUMN
from exact_backfills.sources import KEY_TYPES as KEY_TYPES
from exact_backfills.sources import ORDERED_VERSIONS as ORDERED_VERSIONS
from exact_backfills.sources import QUARANTINE_DAY as QUARANTINE_DAY
from exact_backfills.sources import RUN_COLUMN as RUN_COLUMN
from exact_backfills.sources import VALID_FROM as VALID_FROM
from exact_backfills.sources import ColumnAdded as ColumnAdded
from exact_backfills.sources import ColumnDropped as ColumnDropped
from exact_backfills.sources import ColumnRetyped as ColumnRetyped
from exact_backfills.sources import Rule as Rule
from exact_backfills.sources import Source as Source
from exact_backfills.sources import SourceKind as SourceKind

# `read(upstream)`: the upstream table's rows of the days the build's day dependency on it names.
Read = Callable[[str], DataFrame]
# `build(spark, days, read)`: the table's rows of `days`.
Build = Callable[[SparkSession, list[date], Read], DataFrame]


class SideTable(NamedTuple):
    """A table written with another, from the same build (rows accepted vs rows quarantined)."""

    name: str
    day_column: str


@dataclass(frozen=True)
class Table:
    """A table built by the user's code from its upstream tables.

    - `key`: its natural key, one row per key and day; `day_column`: its daily partition.
    - `upstream`: each table it reads, with the day dependency on it.
    - `build(spark, days, read)`: its rows of `days`; `read(name)` gives an upstream's rows of the days its day
      dependency names (the rows this change builds for that table, the published ones elsewhere). It must be
      deterministic (no clock, no randomness) and read nothing else.
    - `reconcile`: measures equal to an upstream's, day by day; `checks`: the user's own checks.
    - `renamed_from`: the name it was published under before, when it is renamed: `rename` carries its days from that
      table without a rebuild, and the rename alone changes no code version (keep it declared)."""

    name: str
    key: Sequence[str]
    day_column: str
    upstream: Mapping[str, DayDependency]
    build: Build
    description: str = ""
    reconcile: Reconcile | None = None
    checks: Sequence[UserCheck] = ()
    renamed_from: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", tuple(self.key))
        object.__setattr__(self, "checks", tuple(self.checks))

    @property
    def source(self) -> None:
        """A table the user builds takes no source into the lake."""
        return None

    @property
    def side_tables(self) -> tuple[SideTable, ...]:
        return ()


@dataclass(frozen=True)
class Staging:
    """A table the machinery builds from one source. For events: each key's current version on its day, with every
    row breaking the contract in a quarantine side table (`quarantine`, by default `quarantine_<source>`), keyed like
    the source. For a dimension: its versions by the day they take effect (`valid_from`), the newest of a day
    winning, keyed by the source's key and `valid_from`. Late and corrected rows restate exactly the days they
    change."""

    name: str
    source: Source
    description: str = ""
    quarantine: str = ""
    checks: Sequence[UserCheck] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "checks", tuple(self.checks))
        if not self.quarantine and self.events:
            object.__setattr__(self, "quarantine", f"quarantine_{self.source.name}")

    @property
    def upstream(self) -> Mapping[str, DayDependency]:
        """None of the tables: its source's landing is its upstream in Dagster."""
        return {}

    @property
    def reconcile(self) -> None:
        return None

    @property
    def events(self) -> bool:
        return self.source.kind is SourceKind.EVENTS

    @property
    def key(self) -> tuple[str, ...]:
        return tuple(self.source.key) if self.events else (*self.source.key, VALID_FROM)

    @property
    def day_column(self) -> str:
        return self.source.day if self.events else VALID_FROM

    @property
    def side_tables(self) -> tuple[SideTable, ...]:
        return (SideTable(self.quarantine, QUARANTINE_DAY),) if self.events else ()


Declared = Table | Staging


@dataclass(frozen=True)
class Demo:
    """What `generate` asks a pipeline's demo data generator for."""

    start: date
    end: date
    seed: int
    rows_per_day: int
    bad_rate: float


@dataclass(frozen=True)
class Command:
    """A command of the pipeline's own on the command line, one that lands data (the landing is observed in Dagster
    afterwards): `arguments` adds its options, `run` lands and says what it landed."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[SparkSession, argparse.Namespace], str]


@dataclass(frozen=True)
class Pipeline:
    """A daily pipeline: its sources, its tables (in any order: published in the graph's) and its calendar (the days
    they are partitioned by), and optionally a deterministic demo data generator (`generate(spark, Demo) -> what it
    landed`) and commands of its own."""

    name: str
    sources: Sequence[Source]
    tables: Sequence[Declared]
    calendar: Calendar | None = None  # refused when missing: every pipeline states its days
    generate: Callable[[SparkSession, Demo], str] | None = None
    commands: Sequence[Command] = ()
    description: str = ""
    declared_in: str = field(default="", init=False, compare=False, repr=False)

    def with_calendar(self, calendar: Calendar) -> "Pipeline":
        """The same pipeline on another calendar (say, with a deadline): its tables' code versions still read where
        this one was declared."""
        other = replace(self, calendar=calendar)
        object.__setattr__(other, "declared_in", self.declared_in)
        return other

    def __post_init__(self) -> None:
        # The module that declares it: code versions read its declarations there.
        object.__setattr__(self, "declared_in", sys._getframe(2).f_globals.get("__name__", ""))
        object.__setattr__(self, "sources", tuple(self.sources))
        object.__setattr__(self, "tables", tuple(self.tables))
        object.__setattr__(self, "commands", tuple(self.commands))
        problems = self._problems()
        if problems:
            raise DeclarationError(
                f"pipeline {self.name!r}: {problems[0]}"
                + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
            )

    @property
    def partitions(self) -> Partitions:
        """The days its tables are partitioned by now: its calendar's, with the environment's PARTITION_START_DATE and
        PARTITION_END_DATE where set, an open calendar ending today (read on every call, never at import)."""
        assert self.calendar is not None  # refused when declared without one
        return self.calendar.in_effect()

    def _problems(self) -> list[str]:
        found: list[str] = []
        if not self.name.isidentifier():
            found.append(f"its name {self.name!r} is not an identifier (it names a Dagster group and a folder)")
        found += declared_calendar_problems(self.calendar)
        source_names = [s.name for s in self.sources]
        found += [
            f"source {n} is declared twice" for n in sorted({n for n in source_names if source_names.count(n) > 1})
        ]
        for source in self.sources:
            found += [f"source {source.name}: {p}" for p in source.problems()]
            zone = self.calendar.timezone if isinstance(self.calendar, Calendar) else None
            if source.day_of and zone and source.timezone != zone:
                found.append(f"source {source.name}: its days are {source.timezone}'s, its calendar's are {zone}'s")
        names = [n for t in self.tables for n in (t.name, *(s.name for s in t.side_tables))]
        found += [f"table {n} is declared twice" for n in sorted({n for n in names if names.count(n) > 1})]
        by_name = {t.name: t for t in self.tables}
        staged = [t.source.name for t in self.tables if isinstance(t, Staging)]
        for t in self.tables:
            if isinstance(t, Staging):
                if t.source.name not in source_names:
                    found.append(f"table {t.name}: its source {t.source.name} is not one of the pipeline's sources")
                if staged.count(t.source.name) > 1:
                    found.append(f"source {t.source.name} is staged by more than one table")
                continue
            for up, dependency in t.upstream.items():
                if up == t.name:
                    found.append(f"table {t.name}: it reads itself; a table built from its own days is not supported")
                elif up not in by_name:
                    found.append(f"table {t.name}: its upstream {up} is not a table of the pipeline")
                elif not isinstance(dependency, DayDependency):
                    found.append(f"table {t.name}: {dependency!r} is not a day dependency")
                elif problem := dependency.problem(up, _is_dimension(by_name[up])):
                    found.append(f"table {t.name}: {problem}")
            if t.reconcile and t.reconcile.upstream not in t.upstream:
                found.append(f"table {t.name}: it reconciles with {t.reconcile.upstream}, which it does not read")
            elif t.reconcile and not _reads_window(t.upstream[t.reconcile.upstream], t.reconcile.window_days):
                found.append(
                    f"table {t.name}: it reconciles over {t.reconcile.window_days} days of {t.reconcile.upstream}, "
                    "which its day dependency on it does not read (a window of 1 day or more, within TrailingDays)"
                )
            if not t.key:
                found.append(f"table {t.name}: no key")
        for t in self.tables:
            found += [f"table {t.name}: check {c.name}: {why}" for c in t.checks if (why := refused_check(c))]
            check_names = [c.name for c in t.checks]
            found += [
                f"table {t.name}: check {n} is declared twice"
                for n in sorted({n for n in check_names if check_names.count(n) > 1})
            ]
        found += _rename_problems(self.tables)
        for source in self.sources:
            if source.name not in staged:
                found.append(f"source {source.name}: no Staging table takes it into the lake")
        if not found:
            try:
                self.publish_order  # noqa: B018  # a cycle is refused here
            except DeclarationError as e:
                found.append(str(e))
        return found

    @cached_property
    def by_name(self) -> dict[str, Declared]:
        return {t.name: t for t in self.tables}

    def table(self, name: str) -> Declared:
        return self.by_name[name]

    @cached_property
    def publish_order(self) -> list[str]:
        """A topological order of the tables (ties in declaration order): each after every table it reads."""
        order: list[str] = []
        while len(order) < len(self.tables):
            ready = [t.name for t in self.tables if t.name not in order and all(u in order for u in t.upstream)]
            if not ready:
                raise DeclarationError(
                    f"the tables' upstreams form a cycle: {[t.name for t in self.tables if t.name not in order]}"
                )
            order.append(ready[0])
        return order

    @cached_property
    def day_columns(self) -> dict[str, str]:
        """Every table's day column (its partition, and what a write replaces), side tables included."""
        return {
            **{t.name: t.day_column for t in self.tables},
            **{side.name: side.day_column for t in self.tables for side in t.side_tables},
        }

    @cached_property
    def side_table_of(self) -> dict[str, str]:
        """Every side table's table."""
        return {side.name: t.name for t in self.tables for side in t.side_tables}

    def with_side_tables(self, tables: Sequence[str]) -> list[str]:
        """Every table and its side tables, a side table just before its table (as a change commits them)."""
        return [name for t in tables for name in [*(s.name for s in self.by_name[t].side_tables), t]]

    @cached_property
    def renamed(self) -> dict[str, str]:
        """Each renamed table's name -> the name it was published under before."""
        return {t.name: t.renamed_from for t in self.tables if isinstance(t, Table) and t.renamed_from}

    @cached_property
    def every_table(self) -> list[str]:
        """Every table the pipeline writes, side tables included, in publish order."""
        return self.with_side_tables(self.publish_order)

    def downstream(self, tables: set[str]) -> list[str]:
        """`tables` and every table built from them, in publish order."""
        found = set(tables)
        for name in self.publish_order:
            if any(u in found for u in self.by_name[name].upstream):
                found.add(name)
        return [t for t in self.publish_order if t in found]

    def upstream_of(self, table: str) -> set[str]:
        """Every table `table` is built from, directly or not."""
        found: set[str] = set()
        stack = [table]
        while stack:
            for up in self.by_name[stack.pop()].upstream:
                if up not in found:
                    found.add(up)
                    stack.append(up)
        return found

    @cached_property
    def staging(self) -> dict[str, Staging]:
        """Source name -> the table that takes it into the lake."""
        return {t.source.name: t for t in self.tables if isinstance(t, Staging)}

    @cached_property
    def sources_by_name(self) -> dict[str, Source]:
        return {s.name: s for s in self.sources}

    @cached_property
    def landing_assets(self) -> dict[str, Source]:
        """The landing as Dagster assets: `landing_<source>`, observing each source."""
        return {landing_asset(s): s for s in self.sources}

    def upstream_assets(self, table: str) -> list[str]:
        """What a table's asset depends on in Dagster: its upstream tables, or the landing asset of its source."""
        declared = self.by_name[table]
        return [landing_asset(declared.source)] if isinstance(declared, Staging) else list(declared.upstream)


def _rename_problems(tables: Sequence[Declared]) -> list[str]:
    """A table renamed from a name another table has, or from one another renamed table was."""
    names = {n for t in tables for n in (t.name, *(s.name for s in t.side_tables))}
    former = [t.renamed_from for t in tables if isinstance(t, Table) and t.renamed_from]
    found = [
        f"table {t.name}: renamed from {t.renamed_from}, a name the pipeline declares"
        for t in tables
        if isinstance(t, Table) and t.renamed_from in names
    ]
    found += [f"two tables are renamed from {n}" for n in sorted({n for n in former if former.count(n) > 1})]
    return found


def _is_dimension(table: Declared) -> bool:
    return isinstance(table, Staging) and not table.events


def landing_asset(source: Source) -> str:
    return f"landing_{source.name}"


def _reads_window(dependency: DayDependency, window_days: int) -> bool:
    """A reconciliation over `window_days` days of an upstream is served when its day dependency reads them all."""
    if window_days == 1:
        return True
    return (
        window_days > 1
        and isinstance(dependency, Window)
        and dependency.start_offset <= -(window_days - 1)
        and dependency.end_offset >= 0
    )
