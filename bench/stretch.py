"""Days in moving time: the orders pipeline lives a stretch of days on a simulated clock, which the UI's daemon, its
schedules and sensors follow as they follow the wall clock (exact_backfills/clock.py).

    python bench/stretch.py --scale 1 --days 60 --out bench/sf1-stretch.json --docs
    python bench/stretch.py --scale 0.01 --days 3 --history-days 30 --out /tmp/stretch.json  # minutes: end to end

On a new lake, with the clock at 01:00 UTC two days after TPC-H's last day (whose orders land the day after it): TPC-H
at --scale lands and its whole history is backfilled from the UI (`history_backfill_s`). Then, each day of the
stretch, on that clock:
  12:00     its orders land: the items of a day two years before (the same weekday), under new order ids; every
            seventh day with corrections of two items of three days before. The late-data sensor publishes what
            landed, with the default interval (`landed_to_published_s`, by day).
  00:31     the day closed at 00:30 (the calendar's closes_after); the daily run publishes it, ahead of any backfill's
            queued runs (`closed_to_published_s`, by day, from the clock's move to its success).
On the middle day a backfill of every day so far, launched from the UI as the day's orders land, is under way when the
day closes: `daily_run_during_backfill_s` is from that close until the daily run has published the day, with the
default chunk size and priorities (`during_backfill`: its runs and days; the daily run goes ahead of its queued runs,
not of the one under way).
At the end: each table's deadline check on every day of the stretch (the orders pipeline as declared, with a deadline
of 06:00 the next morning), the smallest margin by which a day was first published before it, the live files and bytes
each table holds per day of the stretch, and the lake's storage: its tables' data files, live and replaced, and their
logs; what the days added (the middle day apart) and a year of days at that rate, with no vacuum. Replaced files stay
until a vacuum past the rollback horizon; the vacuum's nightly schedule is stopped here (on a simulated clock it would
remove nothing: Delta dates files by the wall clock).

Seconds are the wall clock's; the daily runs and deadlines are the simulated clock's.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from assets_pkg.pipeline import pipeline as orders  # noqa: E402
from exact_backfills.declare import Pipeline  # noqa: E402

# The deadline the stretch declares: 06:00 the morning after each day (UTC, the orders pipeline's timezone).
DEADLINE = timedelta(hours=6)
# A day of business like the one two years before it, the same weekday.
TEMPLATE_BEFORE = timedelta(weeks=104)
CORRECTED_EVERY = 7  # days: a batch with corrections of items of CORRECTED_BACK days before
CORRECTED_BACK = timedelta(days=3)


def _orders_with_a_deadline() -> Pipeline:
    assert orders.calendar is not None
    return orders.with_calendar(replace(orders.calendar, publish_by=DEADLINE))


# The code location the stretch's UI serves (EXACT_BACKFILLS_PIPELINE).
pipeline = _orders_with_a_deadline()
REFERENCE = "bench.stretch:pipeline"


@dataclass
class Day:
    """One day of the stretch, as it went."""

    day: str
    corrected: bool
    landed_to_published_s: float | None  # None: the middle day, whose landing waited behind the backfill
    closed_to_published_s: float
    daily_run: str


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, required=True)
    parser.add_argument("--days", type=int, default=60, help="days of the stretch (at least 3)")
    parser.add_argument("--history-days", type=int, help="only the first N days of TPC-H's history (a trial's)")
    parser.add_argument("--out", required=True, help="JSON file for the results")
    parser.add_argument("--lake", help="work folder, new (default: a new temporary folder)")
    parser.add_argument("--docs", action="store_true", help="then regenerate docs/performance.md's tables")
    args = parser.parse_args()
    if args.days < 3:
        parser.error("--days: at least 3 (the middle day's backfill needs days before and after it)")
    from bench.run import FIRST_DAY, TPCH_LAST_DAY, Bench, PeakMemory
    from exact_backfills import clock

    lake = Path(args.lake or tempfile.mkdtemp(prefix="stretch-"))
    if lake.exists() and any(lake.iterdir()):
        parser.error(f"--lake {lake} is not empty: the stretch's clock starts on a new lake")
    lake.mkdir(parents=True, exist_ok=True)
    last = FIRST_DAY + timedelta(days=args.history_days - 1) if args.history_days else TPCH_LAST_DAY
    bench = Bench(lake, FIRST_DAY, last, "embedded")
    moving = {
        clock.SIMULATED_CLOCK: str(lake / "clock"),
        "PARTITION_END_DATE": "",  # the calendar's open end: the simulated today
        "EXACT_BACKFILLS_PIPELINE": REFERENCE,
        "PYTHONPATH": str(REPO),  # this module, for the code location
    }
    bench.env.update(moving)
    # This process reads the same clock and calendar, on the bench's engine.
    os.environ.update({**moving, "SPARK_ENGINE_HOME": bench.env["SPARK_ENGINE_HOME"]})
    clock.set_simulated(_at(_first_day(last), 1))  # the day before it closed
    memory = PeakMemory(services=bench.engine_pids)
    try:
        result = {"scale": args.scale, "cpus": os.cpu_count(), "history_days": (last - FIRST_DAY).days + 1}
        result.update({"stretch_days": args.days, "deadline": f"{_clock_time(DEADLINE)} the next morning (UTC)"})
        result.update(_stretch(bench, args.scale, args.days))
        result["peak_memory_mb"] = memory.stop()
    finally:
        bench.stop_engine()
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for key in ("history_backfill_s", "daily_run_during_backfill_s", "closed_to_published_s", "deadline_misses"):
        print(f"{key:28s} {result[key]}")
    if args.docs:
        from bench.report import write_docs

        print(f"wrote {write_docs()}")
    if result["deadline_misses"]:  # none of the stretch's days is delayed on purpose
        print(f"FAILED: deadlines missed: {result['deadline_misses']}", file=sys.stderr)
        return 1
    return 0


def _clock_time(after_midnight: timedelta) -> str:
    minutes = int(after_midnight.total_seconds()) // 60
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _first_day(history_ends: date) -> date:
    """The stretch's first day: TPC-H lands a day's orders the day after (the history's last batch is the day after
    its last day), and a batch of the stretch lands on its day."""
    return history_ends + timedelta(days=2)


def _at(day: date, hour: int, minute: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


def _stretch(bench, scale: float, n_days: int) -> dict:
    from resources.spark import get_spark

    result: dict = {}
    through = ["--through", bench.last.isoformat()]
    result["import_s"] = round(bench.run("-m", "assets_pkg", "import-tpch", "--scale", str(scale), *through)[0], 1)
    spark = get_spark()
    try:
        return _lived(bench, spark, result, n_days)
    finally:
        spark.stop()  # before its engine stops: released at the exit, against a stopped engine, it retried for minutes


def _lived(bench, spark, result: dict, n_days: int) -> dict:
    """The history's backfill, then the stretch's days, and the figures of the end (the module's docstring)."""
    from dagster import AssetSelection, DagsterRunStatus, RunsFilter

    from bench.harness import DagsterDev, SimulatedDays
    from exact_backfills.automation import landing_state
    from exact_backfills.dagster_names import RESTATE_JOB
    from exact_backfills.location import definitions_of

    step = lambda name, seconds: result.__setitem__(name, round(seconds, 1))  # noqa: E731
    first = _first_day(bench.last)
    days = [first + timedelta(days=n) for n in range(n_days)]
    middle = days[n_days // 2]
    assets = [k.to_user_string() for k in AssetSelection.all().resolve(definitions_of(pipeline).resolve_asset_graph())]
    dev = DagsterDev(bench.home, env=bench.env)
    try:
        with bench.instance() as instance:
            simulated = SimulatedDays(dev, instance)
            simulated.start()
            history = [(bench.first + timedelta(days=n)).isoformat() for n in range((first - bench.first).days)]
            t0 = time.monotonic()
            backfill = dev.wait_for_backfill(dev.launch_backfill(assets, history), timeout=6 * 3600)
            assert backfill["status"] == "COMPLETED_SUCCESS", backfill
            step("history_backfill_s", time.monotonic() - t0)
            # The sensor's first look at the landing (every batch, the history's) once the backfill has built the
            # tables: it rewrites nothing, and it is over before the first day lands.
            bench.restatement(dev, landing_state(pipeline))
            dev.wait_until_idle()
            stored_before = _stored(bench.lake)
            went = []
            for n, day in enumerate(days):
                dev.wait_until_idle()  # the restatement found below is this day's landing's
                stored = _stored(bench.lake) if day == middle else None
                simulated.move_to(_at(day, 12))
                corrected = n % CORRECTED_EVERY == CORRECTED_EVERY - 1
                restatements = instance.get_runs_count(RunsFilter(job_name=RESTATE_JOB))
                _land(spark, day, bench.first, corrected)
                t0 = time.monotonic()  # its files are in the landing
                landed = None
                if day == middle:
                    everything = dev.launch_backfill(assets, [*history, *(d.isoformat() for d in days[:n])])
                    _started(instance, everything)
                else:
                    _restated(instance, restatements)
                    landed = round(time.monotonic() - t0, 1)
                simulated.move_to(pipeline.calendar.closes_at(day) + timedelta(minutes=1))
                t0 = time.monotonic()
                daily = simulated.daily_run_of(day, timeout=6 * 3600)
                closed = round(time.monotonic() - t0, 1)
                assert daily.dagster_run.status == DagsterRunStatus.SUCCESS, (day, daily.dagster_run.run_id)
                if day == middle:
                    step("daily_run_during_backfill_s", closed)
                    done = dev.wait_for_backfill(everything, timeout=6 * 3600)
                    assert done["status"] == "COMPLETED_SUCCESS", done
                    result["during_backfill"] = {"runs": len(done["runs"]), "days": len(history) + n}
                    dev.wait_until_idle()
                    assert stored is not None
                    middle_day = _stored(bench.lake) - stored  # the backfill's copy of every day, and the day's own
                went.append(Day(day.isoformat(), corrected, landed, closed, daily.dagster_run.run_id))
                print(f"{day} landed->published {landed} s, closed->published {closed} s", flush=True)
            dev.wait_until_idle()
    finally:
        dev.stop()
    ordinary = [d for d in went if d.day != middle.isoformat()]
    result["landed_to_published_s"] = _spread([d.landed_to_published_s for d in ordinary])
    result["closed_to_published_s"] = _spread([d.closed_to_published_s for d in ordinary])
    result["deadline_misses"], result["deadline_margin_h"] = _deadlines(spark, days)
    result["storage"] = _storage(spark, bench.lake, days, stored_before, middle_day)
    result["days_as_they_went"] = [asdict(d) for d in went]
    return result


def _land(spark, day: date, history_begins: date, corrected: bool) -> None:
    """What lands on `day` at the clock's now: a day like one two years before (or, after a shorter history, whole
    weeks before), and on some days corrections."""
    from bench.harness import a_day_like, corrections, land_batch
    from exact_backfills import clock

    now = clock.now()
    before = day - TEMPLATE_BEFORE
    template = before if before >= history_begins else day - timedelta(weeks=(day - history_begins).days // 7)
    fixes = corrections(spark, day - CORRECTED_BACK, 2) if corrected else []
    land_batch(spark, fixes, day, ingested=now, also=a_day_like(spark, template, day, now))


def _restated(instance, before: int) -> None:
    """Until a restatement after the first `before` has succeeded (the sensor's, of what just landed)."""
    from dagster import DagsterRunStatus as status
    from dagster import RunsFilter

    from exact_backfills.dagster_names import RESTATE_JOB

    deadline = time.monotonic() + 1800
    while time.monotonic() < deadline:
        runs = instance.get_run_records(RunsFilter(job_name=RESTATE_JOB), ascending=True)
        if len(runs) > before and runs[-1].dagster_run.status in (status.SUCCESS, status.FAILURE):
            assert runs[-1].dagster_run.status == status.SUCCESS, runs[-1].dagster_run.run_id
            return
        time.sleep(0.5)
    raise TimeoutError("the sensor did not restate what landed")


def _started(instance, backfill_id: str) -> None:
    """Until a run of the backfill is under way (or over)."""
    from dagster import DagsterRunStatus, RunsFilter

    begun = [DagsterRunStatus.STARTED, DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if instance.get_runs_count(RunsFilter(tags={"dagster/backfill": backfill_id}, statuses=begun)):
            return
        time.sleep(0.5)
    raise TimeoutError(f"no run of backfill {backfill_id} started")


def _spread(seconds: list) -> dict[str, float]:
    return {"median": round(statistics.median(seconds), 1), "max": round(max(seconds), 1)}


def _deadlines(spark, days: list[date]) -> tuple[dict[str, list[str]], float]:
    """Per table, the days of the stretch its deadline check fails on (first published after 06:00 the next morning,
    or not at all); and the smallest margin, in hours, by which a table first published a day before its deadline."""
    from exact_backfills import deadlines

    missed, margins = {}, []
    assert pipeline.calendar is not None
    for table in pipeline.publish_order:
        late = [o.day.isoformat() for o in deadlines.outcomes(spark, pipeline, table, days) if not o.passed]
        if late:
            missed[table] = late
        for day, first in deadlines.first_published(spark, pipeline, table, days).days.items():
            due = pipeline.calendar.deadline(day)
            assert due is not None
            margins.append((due - first).total_seconds() / 3600)
    return missed, round(min(margins), 1)


@dataclass(frozen=True)
class Stored:
    """What the pipeline's tables hold on disk: their data files (live or replaced) and their logs."""

    data_bytes: int
    log_bytes: int

    def __sub__(self, other: "Stored") -> "Stored":
        return Stored(self.data_bytes - other.data_bytes, self.log_bytes - other.log_bytes)


def _stored(lake: Path) -> Stored:
    data = log = 0
    for table in pipeline.day_columns:
        for path in (lake / "warehouse" / table).rglob("*"):
            if path.is_file():
                if "_delta_log" in path.parts:
                    log += path.stat().st_size
                else:
                    data += path.stat().st_size
    return Stored(data, log)


def _storage(spark, lake: Path, days: list[date], before: Stored, middle_day: Stored) -> dict:
    """Per table with rows in the stretch (no product batch and no bad row lands in it), its live data files and bytes
    per day of the stretch; the tables' data (live, and replaced files a vacuum past the horizon removes) and logs at
    the end; what the days added, the middle day and its backfill apart, and a year of days at that rate."""
    from pyspark.sql import functions as F

    from resources.lake import table_path

    per_table_day, live = {}, 0
    for table, column in pipeline.day_columns.items():
        on_disk = {p.name: p.stat().st_size for p in (lake / "warehouse" / table).rglob("*.parquet")}
        rows = spark.read.format("delta").load(table_path(table)).where(F.col(column).isin(days))
        found = [Path(r["file"]).name for r in rows.select(F.input_file_name().alias("file")).distinct().collect()]
        if found:
            per_table_day[table] = {
                "files": round(len(found) / len(days), 2),
                "bytes": round(sum(on_disk[name] for name in found) / len(days)),
            }
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{table_path(table)}`").first()
        live += detail["sizeInBytes"] if detail is not None else 0
    end = _stored(lake)
    by_days = end - before - middle_day
    per_day = (by_days.data_bytes + by_days.log_bytes) / (len(days) - 1)
    return {
        "per_table_day": per_table_day,
        "data_bytes": end.data_bytes,
        "live_data_bytes": live,
        "log_bytes": end.log_bytes,
        "added_by_the_days_bytes": by_days.data_bytes + by_days.log_bytes,
        "added_by_the_middle_day_bytes": middle_day.data_bytes + middle_day.log_bytes,
        "a_year_of_days_bytes": round(per_day * 365),
    }


if __name__ == "__main__":
    sys.exit(main())
