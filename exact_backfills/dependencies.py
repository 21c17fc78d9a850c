"""Which days of which tables a change upstream makes stale, through every table's day dependencies (each knows the
days a changed upstream day reaches: day_dependencies.py), across the graph, whether the change is late data
(`stale_downstream`, which finds the later days holding a dimension's changed keys), code (`stale_by_code`, pure: from
what built each day) or a write of some days that changed what they hold (`left_stale`, pure: the days built from them
it does not write)."""

from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from exact_backfills.calendar import Partitions
from exact_backfills.declare import BATCH_COLUMN, VALID_FROM, DayDependency, Pipeline, Staging
from resources.delta_io import read_table, table_exists


@dataclass
class DayChange:
    """Why a day is stale: keys whose current version is new on it (added or corrected), keys that moved away from
    it, rows landed for it that break the contract, a dimension's versions taking effect on it, keys it reads as of
    the day whose dimension versions changed, upstream days whose change its trailing window holds, and the
    batches."""

    changed: int = 0
    moved_out: int = 0
    quarantined: int = 0
    versions: int = 0
    referenced: int = 0
    window: set[date] = field(default_factory=set)
    batches: set[str] = field(default_factory=set)
    # Left by an earlier run: an interrupted restatement, or a write that changed a day this one is built from.
    pending: bool = False

    @property
    def rows(self) -> int:
        """The landed rows behind the change (a late-data exception counts them)."""
        return self.changed + self.quarantined + self.versions + self.moved_out

    def plus(self, other: "DayChange") -> "DayChange":
        """Both changes of a day."""
        counters = ("changed", "moved_out", "quarantined", "versions", "referenced")
        return DayChange(
            **{c: getattr(self, c) + getattr(other, c) for c in counters},
            window=self.window | other.window,
            batches=self.batches | other.batches,
            pending=self.pending or other.pending,
        )

    def describe(self) -> str:
        windows = ", ".join(str(d) for d in sorted(self.window))
        parts = [
            f"{self.changed} key(s) added or corrected" if self.changed else "",
            f"{self.moved_out} key(s) moved to another day" if self.moved_out else "",
            f"{self.quarantined} row(s) to quarantine" if self.quarantined else "",
            f"{self.versions} version(s) taking effect" if self.versions else "",
            f"{self.referenced} key(s) read as of the day changed" if self.referenced else "",
            f"in the trailing window of the change on {windows}" if self.window else "",
            "pending since an earlier run (it changed a day this one is built from, or was interrupted)"
            if self.pending
            else "",
        ]
        text = ", ".join(p for p in parts if p)
        return text + (f" (batches {', '.join(sorted(self.batches))})" if self.batches else "")


def _carry(
    dependency: DayDependency, day: date, change: DayChange, partitions: Partitions
) -> list[tuple[date, DayChange]]:
    """The stale days `day`'s change makes through `dependency`, and why each: the day itself for the same reasons,
    another day for holding the change in its window."""
    return [
        (d, change if d == day else DayChange(window={day}, batches=set(change.batches), pending=change.pending))
        for d in dependency.downstream_days(day, partitions.first_day, partitions.last_day)
    ]


def left_stale(
    pipeline: Pipeline, changed: Mapping[str, Iterable[date]], written: Mapping[str, Iterable[date]], last: date
) -> dict[str, set[date]]:
    """Table -> the days a change leaves stale outside what it writes: every day built, through the day dependencies,
    from a day whose content it changed (`changed`), that it does not write itself (`written`, built from what the
    change leaves). A dimension read as of the day makes every later day stale, up to `last`."""
    first_day = pipeline.partitions.first_day

    stale: dict[str, set[date]] = {}
    for name in pipeline.publish_order:
        found: set[date] = set()
        for up, dependency in pipeline.by_name[name].upstream.items():
            days = set(changed.get(up, ())) | stale.get(up, set())
            if not days:
                continue
            found |= set(dependency.downstream_of(days, first_day, last))
        found -= set(written.get(name, ()))
        if found:
            stale[name] = found
    return stale


def carried_beyond(
    pipeline: Pipeline,
    changed: Mapping[str, Iterable[date]],
    written: Mapping[str, Iterable[date]],
    last: date,
    published: Mapping[str, Iterable[date]],
    held: set[date],
) -> dict[str, list[date]]:
    """Table -> the days a change writing `written`, whose content changes on `changed`, also rebuilds so that it
    leaves nothing stale behind (a rollback's, a release's): every published day built, through the day
    dependencies, from a changed day, directly or through another table's, that it does not write itself; not the
    days held since a rollback, which stay as the operator holds them."""
    reached = left_stale(pipeline, changed, {}, last)
    found = {
        t: sorted(d for d in days - set(written.get(t, ())) if d in set(published.get(t, ())) and d not in held)
        for t, days in reached.items()
    }
    return {t: days for t, days in found.items() if days}


@dataclass
class DimensionChange:
    """A dimension's new versions in the restatement window: its key columns, valid_from and the batch of each."""

    versions: DataFrame


def _as_of_days(
    spark: SparkSession, pipeline: Pipeline, table: str, dimension: str, on: Sequence[str], change: DimensionChange
) -> dict[date, DayChange]:
    """The published days of `table`, read as of the day from `dimension`, that the new versions make stale: from a
    key's first new version on, the days whose rows hold the key in the columns `on` (every day from the first new
    version on, with no `on`)."""
    if not table_exists(table):
        return {}
    source = pipeline.by_name[dimension].source
    assert source is not None
    key = list(source.key)
    day = pipeline.day_columns[table]
    since = change.versions.groupBy(*key).agg(
        F.min(VALID_FROM).alias("_since"), F.collect_set(F.col(BATCH_COLUMN).cast("string")).alias("_batches")
    )
    published = read_table(spark, table)
    if on:
        rows = published.select(*[F.col(o).alias(k) for o, k in zip(on, key, strict=True)], F.col(day).alias("_day"))
        affected = rows.join(since, key).where(F.col("_day") >= F.col("_since"))
        per_day = (
            affected.select("_day", *key, F.explode("_batches").alias("_batch"))
            .distinct()
            .groupBy("_day")
            .agg(F.count(F.lit(1)).alias("n"), F.collect_set("_batch").alias("batches"))
        )
    else:
        first = since.agg(F.min("_since").alias("_since"), F.flatten(F.collect_set("_batches")).alias("batches"))
        per_day = (
            published.select(F.col(day).alias("_day"))
            .distinct()
            .crossJoin(first)
            .where(F.col("_day") >= F.col("_since"))
            .select("_day", F.lit(1).alias("n"), "batches")
        )
    return {r._day: DayChange(referenced=r.n, batches=set(r.batches)) for r in per_day.collect()}


def stale_downstream(
    spark: SparkSession,
    pipeline: Pipeline,
    changed: Mapping[str, Mapping[date, DayChange]],
    dimensions: Mapping[str, DimensionChange],
) -> dict[str, dict[date, DayChange]]:
    """Table -> its stale days, in publish order: the staging tables' `changed` days, and every day of every table
    built from them that its day dependencies make stale. `dimensions`: each dimension's new versions, for the tables
    reading it as of the day."""
    stale: dict[str, dict[date, DayChange]] = {}
    for name in pipeline.publish_order:
        table = pipeline.by_name[name]
        days = stale.setdefault(name, dict(changed.get(name, {})) if isinstance(table, Staging) else {})
        for up, dependency in table.upstream.items():
            keys = dependency.keys_as_of
            if keys is not None:  # a dimension's new versions, by the keys the table's days hold
                found = _as_of_days(spark, pipeline, name, up, keys, dimensions[up]) if up in dimensions else {}
                for day, change in found.items():
                    days[day] = days[day].plus(change) if day in days else change
                continue
            for upstream_day, change in stale.get(up, {}).items():
                for day, why in _carry(dependency, upstream_day, change, pipeline.partitions):
                    days[day] = days[day].plus(why) if day in days else why
    return stale


@dataclass(frozen=True)
class CodeChange:
    """Why a day is stale by code: the code of `table` (the day's own table, or one it is built from) changed."""

    table: str
    built_by: str | None  # the version of `table`'s code that built the day (None: not recorded)
    current: str

    def describe(self) -> str:
        return f"{self.table}: code changed ({self.built_by or 'unrecorded'} → {self.current})"


def _stale_through(
    dependency: DayDependency, changed: Mapping[date, CodeChange], published: Mapping[date, object]
) -> dict[date, CodeChange]:
    """The published days stale through `dependency` on an upstream whose `changed` days are stale, each with the
    reason of the latest changed upstream day it is built from."""
    changed_days = sorted(changed)
    found = {}
    for d in published:
        span = dependency.upstream_span(d)
        latest = bisect_right(changed_days, span.last) - 1
        if latest >= 0 and changed_days[latest] >= span.first:
            found[d] = changed[changed_days[latest]]
    return found


def stale_by_code(
    pipeline: Pipeline, built_by: Mapping[str, Mapping[date, str | None]], current: Mapping[str, str]
) -> dict[str, dict[date, CodeChange]]:
    """Table -> its published days stale by code, each with why. `built_by`: table -> published day -> the code version
    that built it; `current`: table -> its code version now. A day of a table built from a stale day of another is
    stale too, through the day dependency on it (every later day of a dimension read as of the day)."""
    stale: dict[str, dict[date, CodeChange]] = {}
    for table in pipeline.publish_order:
        published = built_by.get(table, {})
        days: dict[date, CodeChange] = {}
        for upstream, dependency in pipeline.by_name[table].upstream.items():
            changed = stale.get(upstream)
            if changed:
                for d, why in _stale_through(dependency, changed, published).items():
                    days.setdefault(d, why)
        own = {d: CodeChange(table, v, current[table]) for d, v in published.items() if v != current[table]}
        stale[table] = {**days, **own}  # a day its own code built stale says so first
    return stale
