"""Days in moving time: the orders pipeline lives a stretch of days on a simulated clock, which the UI's daemon, its
schedules and sensors follow as they follow the wall clock (exact_backfills/clock.py).

    python bench/stretch.py --scale 1 --days 60 --out bench/sf1-stretch.json --docs
    python bench/stretch.py --scale 0.01 --days 4 --out /tmp/stretch.json    # minutes: the harness end to end

On a new lake, with the clock at 01:00 UTC two days after TPC-H's last day (whose orders land the day after it): TPC-H
at --scale lands and its whole history is backfilled from the UI (`history_backfill_s`). Then, each day of the
stretch, on that clock:
  12:00     its orders land: the items of a day two years before (the same weekday), under new order ids; every
            seventh day with corrections of two items of three days before. The late-data sensor publishes what
            landed, with the default interval (`landed_to_published_s`, by day).
  00:31     the day closed at 00:30 (the calendar's closes_after); the daily run publishes it, ahead of any backfill's
            queued runs (`closed_to_published_s`, by day, from the clock's move to its success).
On the middle day a backfill of every day so far, launched from the UI when the day's orders have landed, is under way
when the day closes: `daily_run_during_backfill_s` is from that close until the daily run has published the day, with
the default chunk and priorities (`during_backfill_chunk_days`).
At the end: each table's deadline check on every day of the stretch (the orders pipeline as declared, with a deadline
of 06:00 the next morning), the files and bytes each table holds per day of the stretch, and the lake's storage: what
the stretch added, and a year at that rate. Old versions stay until a vacuum past the rollback horizon; the vacuum's
nightly schedule is stopped here (on a simulated clock it would remove nothing: Delta dates files by the wall clock).

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
    declared = Pipeline(
        name=orders.name,
        sources=orders.sources,
        tables=orders.tables,
        calendar=replace(orders.calendar, publish_by=DEADLINE),
        generate=orders.generate,
        commands=orders.commands,
        description=orders.description,
    )
    # Its tables are the orders pipeline's: their code versions are read where those are declared.
    object.__setattr__(declared, "declared_in", orders.declared_in)
    return declared


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
    parser.add_argument("--out", required=True, help="JSON file for the results")
    parser.add_argument("--lake", help="work folder (default: a new temporary folder)")
    parser.add_argument("--docs", action="store_true", help="then regenerate docs/performance.md's tables")
    args = parser.parse_args()
    if args.days < 3:
        parser.error("--days: at least 3 (the middle day's backfill needs days before and after it)")
    from bench.run import FIRST_DAY, TPCH_LAST_DAY, Bench, PeakMemory
    from exact_backfills import clock

    lake = Path(args.lake or tempfile.mkdtemp(prefix="stretch-"))
    lake.mkdir(parents=True, exist_ok=True)
    bench = Bench(lake, FIRST_DAY, TPCH_LAST_DAY, "embedded")
    moving = {
        clock.SIMULATED_CLOCK: str(lake / "clock"),
        "PARTITION_END_DATE": "",  # the calendar's open end: the simulated today
        "EXACT_BACKFILLS_PIPELINE": REFERENCE,
        "PYTHONPATH": str(REPO),  # this module, for the code location
    }
    bench.env.update(moving)
    os.environ.update(moving)  # this process reads the same clock and calendar
    clock.set_simulated(_at(_first_day(TPCH_LAST_DAY), 1))  # the day before it closed
    memory = PeakMemory(services=bench.engine_pids)
    try:
        result = {"scale": args.scale, "cpus": os.cpu_count(), "stretch_days": args.days, "deadline": "06:00 UTC"}
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


def _first_day(history_ends: date) -> date:
    """The stretch's first day: TPC-H lands a day's orders the day after (the history's last batch is the day after
    its last day), and a batch of the stretch lands on its day."""
    return history_ends + timedelta(days=2)


def _at(day: date, hour: int, minute: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


def _stretch(bench, scale: float, n_days: int) -> dict:
    from dagster import AssetSelection, DagsterRunStatus, RunsFilter

    from bench.harness import DagsterDev, SimulatedDays
    from bench.run import FIRST_DAY, TPCH_LAST_DAY
    from exact_backfills.dagster_names import RESTATE_JOB
    from exact_backfills.location import definitions_of
    from resources.spark import get_spark

    result: dict = {}
    step = lambda name, seconds: result.__setitem__(name, round(seconds, 1))  # noqa: E731
    step("import_s", bench.run("-m", "assets_pkg", "import-tpch", "--scale", str(scale))[0])
    spark = get_spark()
    first = _first_day(TPCH_LAST_DAY)
    days = [first + timedelta(days=n) for n in range(n_days)]
    middle = days[n_days // 2]
    assets = [k.to_user_string() for k in AssetSelection.all().resolve(definitions_of(pipeline).resolve_asset_graph())]
    dev = DagsterDev(bench.home, env=bench.env)
    try:
        with bench.instance() as instance:
            simulated = SimulatedDays(dev, instance)
            simulated.start()
            history = [(FIRST_DAY + timedelta(days=n)).isoformat() for n in range((first - FIRST_DAY).days)]
            t0 = time.monotonic()
            backfill = dev.wait_for_backfill(dev.launch_backfill(assets, history), timeout=6 * 3600)
            assert backfill["status"] == "COMPLETED_SUCCESS", backfill
            step("history_backfill_s", time.monotonic() - t0)
            dev.wait_until_idle()  # the sensor's first look at the landing, queued behind it
            stored_before = _stored_bytes(bench.lake)
            went = []
            for n, day in enumerate(days):
                stored = _stored_bytes(bench.lake)
                simulated.move_to(_at(day, 12))
                corrected = n % CORRECTED_EVERY == CORRECTED_EVERY - 1
                restatements = instance.get_runs_count(RunsFilter(job_name=RESTATE_JOB))
                _land(spark, day, corrected)
                t0 = time.monotonic()  # its files are in the landing
                if day == middle:
                    everything = dev.launch_backfill(assets, [*history, *(d.isoformat() for d in days[:n])])
                    _started(instance, everything)
                    landed = None
                else:
                    _restated(instance, restatements)
                    landed = time.monotonic() - t0
                simulated.move_to(pipeline.calendar.closes_at(day) + timedelta(minutes=1))
                t0 = time.monotonic()
                daily = simulated.daily_run_of(day, timeout=6 * 3600)
                closed = time.monotonic() - t0
                assert daily.dagster_run.status == DagsterRunStatus.SUCCESS, (day, daily.dagster_run.run_id)
                if day == middle:
                    step("daily_run_during_backfill_s", closed)
                    result["during_backfill_chunk_days"] = int(bench.value(_CHUNK))
                    dev.wait_for_backfill(everything, timeout=6 * 3600)
                    dev.wait_until_idle()
                    backfilled = _stored_bytes(bench.lake) - stored  # that day's own writes too: a few KB
                landed = None if landed is None else round(landed, 1)
                went.append(Day(day.isoformat(), corrected, landed, round(closed, 1), daily.dagster_run.run_id))
                print(
                    f"{day} landed->published {landed and round(landed, 1)} s, closed->published {closed:.1f} s",
                    flush=True,
                )
            dev.wait_until_idle()
    finally:
        dev.stop()
    ordinary = [d for d in went if d.landed_to_published_s is not None and d.day != middle.isoformat()]
    result["landed_to_published_s"] = _spread([d.landed_to_published_s for d in ordinary])
    result["closed_to_published_s"] = _spread([d.closed_to_published_s for d in ordinary])
    result["deadline_misses"] = _missed(spark, days)
    result["storage"] = _storage(spark, bench.lake, days, stored_before, backfilled)
    result["days_as_they_went"] = [asdict(d) for d in went]
    return result


_CHUNK = "from exact_backfills import landing; from bench.stretch import pipeline; "
_CHUNK += "print(landing.days_per_backfill_run(pipeline))"


def _land(spark, day: date, corrected: bool) -> None:
    """What lands on `day` at the clock's now: a day like one two years before, and on some days corrections."""
    from bench.harness import a_day_like, corrections, land_batch
    from exact_backfills import clock

    now = clock.now()
    fixes = corrections(spark, day - CORRECTED_BACK, 2) if corrected else []
    land_batch(spark, fixes, day, ingested=now, also=a_day_like(spark, day - TEMPLATE_BEFORE, day, now))


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
    """Until a run of the backfill is under way."""
    from dagster import DagsterRunStatus, RunsFilter

    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        started = RunsFilter(tags={"dagster/backfill": backfill_id}, statuses=[DagsterRunStatus.STARTED])
        if instance.get_runs_count(started):
            return
        time.sleep(0.5)
    raise TimeoutError(f"no run of backfill {backfill_id} started")


def _spread(seconds: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(seconds), 1), "max": round(max(seconds), 1)}


def _missed(spark, days: list[date]) -> dict[str, list[str]]:
    """Per table, the days of the stretch its deadline check fails on (first published after 06:00 the next
    morning, or not at all)."""
    from exact_backfills import deadlines

    found = {}
    for table in pipeline.publish_order:
        late = [o.day.isoformat() for o in deadlines.outcomes(spark, pipeline, table, days) if not o.passed]
        if late:
            found[table] = late
    return found


def _stored_bytes(lake: Path) -> int:
    """Every file the lake's tables hold: live data, replaced files awaiting a vacuum, and their logs."""
    return sum(f.stat().st_size for f in (lake / "warehouse").rglob("*") if f.is_file())


def _storage(spark, lake: Path, days: list[date], stored_before: int, backfilled: int) -> dict:
    """Per table, the live data files and bytes per day of the stretch; what the stretch added to the lake, the middle
    day's backfill apart (it rewrote every day: the files it replaced stay until a vacuum), and a year of days at the
    daily rate; and how much of the lake is live (the rest is what a vacuum past the rollback horizon removes)."""
    from pyspark.sql import functions as F

    from resources.lake import table_path

    per_table_day, live = {}, 0
    for table, column in pipeline.day_columns.items():
        on_disk = {p.name: p.stat().st_size for p in (lake / "warehouse" / table).rglob("*.parquet")}
        rows = spark.read.format("delta").load(table_path(table)).where(F.col(column).isin(days))
        found = [Path(r["file"]).name for r in rows.select(F.input_file_name().alias("file")).distinct().collect()]
        per_table_day[table] = {
            "files": round(len(found) / len(days), 2),
            "bytes": round(sum(on_disk[name] for name in found) / len(days)),
        }
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{table_path(table)}`").first()
        live += detail["sizeInBytes"] if detail is not None else 0
    stored = _stored_bytes(lake)
    daily = stored - stored_before - backfilled
    return {
        "per_table_day": per_table_day,
        "stored_bytes": stored,
        "live_bytes": live,
        "added_by_the_days_bytes": daily,
        "added_by_the_backfill_bytes": backfilled,
        "a_year_of_days_bytes": round(daily / len(days) * 365),
    }


if __name__ == "__main__":
    sys.exit(main())
