"""What a backfill or a plan will cost, said before it runs: the runs, tables and days it writes, what it reads (the
landed batches and their bytes, the published files), and a duration fitted from the runs this instance recorded on
the same profile (a fixed cost per run plus a cost per table-day); then the same figures measured once it is done, so
that the estimate can be judged. The fit and the wording are pure."""

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import date
from typing import Any, NamedTuple

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from pyspark.sql import SparkSession

from exact_backfills import landing, landing_index
from exact_backfills.builds import narrowed
from exact_backfills.dagster_names import PROFILE_TAG, TABLE_DAYS_TAG
from exact_backfills.declare import Pipeline
from exact_backfills.partitions import days as day_range
from exact_backfills.verification import stale_code_days
from resources import storage
from resources.delta_io import table_exists
from resources.lake import table_path
from resources.settings import settings

# The most recent successful runs the duration is fitted from.
FITTED_FROM_RUNS = 50


@dataclass(frozen=True)
class RunCost:
    """A recorded run: the table-days it published (its materializations) and how long it took."""

    table_days: int
    seconds: float


@dataclass(frozen=True)
class CostModel:
    """seconds = fixed_s per run + per_table_day_s per table-day, fitted from `runs` recorded runs."""

    fixed_s: float
    per_table_day_s: float
    runs: int

    def seconds(self, runs: int, table_days: int) -> float:
        return runs * self.fixed_s + table_days * self.per_table_day_s


def fit(costs: Sequence[RunCost]) -> CostModel | None:
    """Least squares of a run's seconds on its table-days, with neither cost below 0. None without a run that
    published; with runs of a single size, the whole cost is per table-day."""
    usable = [c for c in costs if c.table_days > 0]
    if not usable:
        return None
    n = len(usable)
    mean_x = sum(c.table_days for c in usable) / n
    mean_y = sum(c.seconds for c in usable) / n
    sxx = sum((c.table_days - mean_x) ** 2 for c in usable)
    slope = sum((c.table_days - mean_x) * (c.seconds - mean_y) for c in usable) / sxx if sxx else 0.0
    fixed = mean_y - slope * mean_x
    if not sxx or fixed < 0:  # through the origin
        slope, fixed = sum(c.table_days * c.seconds for c in usable) / sum(c.table_days**2 for c in usable), 0.0
    if slope < 0:
        slope, fixed = 0.0, mean_y
    return CostModel(fixed, slope, n)


@dataclass(frozen=True)
class Reads:
    """What the work reads: landed batches (a batch read by two runs counts twice) and their bytes, and the files of
    the published tables it reads."""

    landed_batches: int
    landed_bytes: int
    published_files: int


@dataclass(frozen=True)
class Work:
    """What an operation writes: its runs, each a range of days, and per table the days it writes."""

    runs: list[tuple[date, date]]
    days: Mapping[str, Sequence[date]]

    @property
    def table_days(self) -> int:
        return sum(len(d) for d in self.days.values())


@dataclass(frozen=True)
class Estimate:
    work: Work
    reads: Reads
    model: CostModel | None
    profile: str

    @property
    def seconds(self) -> float | None:
        return self.model.seconds(len(self.work.runs), self.work.table_days) if self.model else None

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": len(self.work.runs),
            "table_days": self.work.table_days,
            **asdict(self.reads),
            "seconds": self.seconds,
            "profile": self.profile,
            "fitted_from_runs": self.model.runs if self.model else 0,
        }


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def describe(what: str, estimate: Estimate, upper_bound: bool = False) -> list[str]:
    """The lines printed before `what` runs."""
    work, reads = estimate.work, estimate.reads
    at_most = "at most " if upper_bound else ""
    tables = ", ".join(f"{t} {len(d)}" for t, d in work.days.items() if d) or "none"
    lines = [
        f"{what}: {len(work.runs)} run(s), {at_most}{work.table_days} table-day(s) to write ({tables})",
        f"  reads {reads.landed_batches} landed batch(es) ({_size(reads.landed_bytes)}) and "
        f"{reads.published_files} published file(s)",
    ]
    model = estimate.model
    if model is None:
        lines.append(f"  estimated time: unknown (no run recorded on the {estimate.profile} profile yet)")
    else:
        lines.append(
            f"  estimated time: {estimate.seconds:.0f}s ({model.fixed_s:.1f}s per run + {model.per_table_day_s:.3f}s "
            f"per table-day, fitted from {model.runs} {estimate.profile} run(s))"
        )
    return lines


class Measured(NamedTuple):
    """What an operation took, once done."""

    runs: int
    table_days: int
    seconds: float


def describe_measured(what: str, estimate: Estimate, measured: Measured) -> str:
    """The line printed once `what` is done, beside what was estimated."""
    guess = f"{estimate.seconds:.0f}s" if estimate.seconds is not None else "unknown"
    return (
        f"{what} measured: {measured.runs} run(s), {measured.table_days} table-day(s) built in "
        f"{measured.seconds:.0f}s (estimated: {len(estimate.work.runs)} run(s), {estimate.work.table_days} "
        f"table-day(s), {guess})"
    )


def recorded_costs(instance: DagsterInstance, profile: str, limit: int = FITTED_FROM_RUNS) -> list[RunCost]:
    """The latest successful runs on `profile` that published: their table-days and duration."""
    records = instance.get_run_records(
        RunsFilter(statuses=[DagsterRunStatus.SUCCESS], tags={PROFILE_TAG: profile}), limit=limit
    )
    costs = []
    for record in records:
        if record.start_time is None or record.end_time is None:
            continue
        tagged = record.dagster_run.tags.get(TABLE_DAYS_TAG)
        published = (
            int(tagged) if tagged is not None else instance.get_run_stats(record.dagster_run.run_id).materializations
        )
        costs.append(RunCost(published, record.end_time - record.start_time))
    return costs


def _files_by_day(spark: SparkSession, table: str, day_column: str) -> Counter[date | None]:
    """The published table's live files, counted by the day folder they sit in (None: not in one)."""
    folder = f"{day_column}="
    found: Counter[date | None] = Counter()
    if table_exists(table):
        for path in spark.read.format("delta").load(table_path(table)).inputFiles():
            part = next((p for p in path.split("/") if p.startswith(folder)), None)
            found[date.fromisoformat(part[len(folder) :]) if part else None] += 1
    return found


def reads(spark: SparkSession, pipeline: Pipeline, work: Work, compared: bool = False) -> Reads:
    """What `work` reads, run by run: the landed batches that can hold each staging table's days (every batch, for a
    run over most of the history), and the published files of each upstream table it does not write, on the days its
    day dependency reads (with `compared`, of the tables it writes too: a plan compares its rows with them). Reads the
    landing index without adding to it: a batch not indexed yet counts as read."""
    index = landing_index.indexed(spark, pipeline)
    files_of: dict[str, Counter[date | None]] = {}  # each table's files listed once, whatever the runs
    batch_dirs = {source.name: landing.batch_dirs(source) for source in pipeline.sources}
    sizes: dict[str, int] = {}
    batches = size = files = 0
    for first, last in work.runs:
        for name, all_days in work.days.items():
            days = [d for d in all_days if first <= d <= last]
            if not days or name not in pipeline.by_name:  # a side table is written by its table's build
                continue
            table = pipeline.by_name[name]
            source = table.source.name if table.source else None
            wanted, narrow = set(days), narrowed(days, pipeline.partitions)
            for batch_dir in batch_dirs[source] if source else []:
                holds = index.get(source or "", {}).get(landing.batch_name(batch_dir))
                if narrow and holds is not None and not holds & wanted:
                    continue
                if batch_dir.path not in sizes:
                    sizes[batch_dir.path] = sum(f.size for f in storage.files_below(batch_dir.path))
                batches += 1
                size += sizes[batch_dir.path]
            published = [u for u in table.upstream if compared or u not in work.days]
            for upstream in [*published, name] if compared else published:
                if upstream not in files_of:
                    files_of[upstream] = _files_by_day(spark, upstream, pipeline.day_columns[upstream])
                counted = files_of[upstream]
                dependency = table.upstream.get(upstream)
                partitions = pipeline.partitions
                read = (
                    set(dependency.upstream_days(days, partitions.first_day, partitions.last_day))
                    if dependency
                    else wanted
                )
                files += sum(n for d, n in counted.items() if d is None or d in read)
    return Reads(batches, size, files)


def _estimate(
    spark: SparkSession, pipeline: Pipeline, instance: DagsterInstance, work: Work, compared: bool = False
) -> Estimate:
    profile = settings().profile
    return Estimate(work, reads(spark, pipeline, work, compared), fit(recorded_costs(instance, profile)), profile)


def for_backfill(
    spark: SparkSession,
    pipeline: Pipeline,
    instance: DagsterInstance,
    runs: list[tuple[date, date]],
    tables: list[str],
) -> Estimate:
    """A backfill of `tables` (side tables included) in `runs`: every day of each."""
    days = day_range(runs[0][0], runs[-1][1])
    return _estimate(spark, pipeline, instance, Work(runs, {t: days for t in tables}))


def for_plan(
    spark: SparkSession, pipeline: Pipeline, instance: DagsterInstance, start: date, end: date, tables: list[str]
) -> Estimate:
    """A plan over start..end for `tables`: one run, rebuilding at most their days stale by code (fewer when a change
    leaves an upstream day unchanged), and comparing them with what is published."""
    stale = stale_code_days(spark, pipeline)
    days = {t: sorted(d for d in stale.get(t, {}) if start <= d <= end) for t in tables}
    return _estimate(
        spark, pipeline, instance, Work([(start, end)], {t: d for t, d in days.items() if d}), compared=True
    )
