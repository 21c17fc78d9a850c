"""The project's backfills against a bare PySpark job, on TPC-H, in one invocation on one machine.

    python bench/run.py --scale 1 --out bench/sf1.json            # the README's performance table
    python bench/run.py --scale 0.01 --days 30 --out /tmp/tiny.json  # minutes: proves the harness end to end
    python bench/run.py --steps-of LAKE                              # where the runs' time went, run by run, step by step

Steps, each in its own process as users run them (so each pays its own JVM start):
  import     import-tpch through the landing contract
  bare       one Spark application building fact_order_item and daily_revenue (Delta, by day) from the same
             landing: the practical floor for this engine
  daemon     `dagster dev`, then a backfill of every asset and check over every day, launched with the GraphQL
             mutation the UI's dialog sends, timed from launch to completion
  inprocess  the same backfill through `python -m assets_pkg backfill`
  noop       `restate` with no new data, as the sensor runs it after a backfill: the partitions it rewrites
             (should be 0); it also sets the watermark
  restate3   a batch correcting items on 3 old days (inside the restatement window), then `restate`, timed from
             the process start (JVM included) to the last check
  idle       `restate` again, with nothing new: what the restatement path costs before it has any day to write

Two floors come out of the same runs: `daemon_overhead_s`, the daemon backfill's time before its first run's launch
and after its last run's end (Dagster's backfill loop, creating and launching the run: all of its time outside the
run, with the one run launched here), and `restate_idle_s`. A backfill costing exactly the bare job would
still take `daemon_floor_vs_bare` times it through the daemon; a restatement with nothing to write already takes
`restate_idle_vs_backfill` of the backfill.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from datetime import date, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FIRST_DAY, TPCH_LAST_DAY = date(1992, 1, 1), date(1998, 8, 2)


class PeakMemory:
    """Peak resident memory of this process and all its descendants (Python, JVMs, dagster dev), sampled."""

    def __init__(self, interval: float = 0.5):
        self.peak_mb, self._stop = 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval):
        while not self._stop.wait(interval):
            self.peak_mb = max(self.peak_mb, self._tree_rss_mb())

    @staticmethod
    def _tree_rss_mb() -> float:
        out = subprocess.run(["ps", "-eo", "pid=,ppid=,rss="], capture_output=True, text=True).stdout
        procs = [tuple(int(x) for x in line.split()) for line in out.splitlines() if line.strip()]
        children: dict[int, list[tuple[int, int]]] = {}
        for pid, ppid, rss in procs:
            children.setdefault(ppid, []).append((pid, rss))
        total, stack = 0, [os.getpid()]
        own = {pid: rss for pid, _, rss in procs}
        total += own.get(os.getpid(), 0)
        while stack:
            for pid, rss in children.get(stack.pop(), []):
                total += rss
                stack.append(pid)
        return total / 1024

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return round(self.peak_mb, 1)


def _bare() -> None:
    """One Spark application: the same rows as the project's fact_order_item and daily_revenue, no checks, no Dagster."""
    from pyspark.sql import functions as F

    from assets_pkg import landing, quarantine, transforms
    from assets_pkg.partitions import days as day_range
    from assets_pkg.partitions import first_day, last_day
    from resources.lake import lake_root
    from resources.spark import get_spark

    spark = get_spark()
    all_days = day_range(first_day(), last_day())
    versions, _ = quarantine.split(landing.read_landing(spark, landing.ORDER_ITEMS), first_day(), last_day())
    stg = transforms.stg_order_items(versions, all_days)
    products = transforms.dim_product_changes(landing.read_landing(spark, landing.PRODUCTS), first_day(), all_days)
    fact = transforms.fact_order_item(stg, products)
    out = lake_root() / "bare"
    fact.repartition("order_date").write.format("delta").mode("overwrite").partitionBy("order_date").save(str(out / "fact_order_item"))
    written = spark.read.format("delta").load(str(out / "fact_order_item"))
    revenue = transforms.daily_revenue(written)
    revenue.repartition("order_date").write.format("delta").mode("overwrite").partitionBy("order_date").save(str(out / "daily_revenue"))
    print(json.dumps({"fact_rows": written.count(), "revenue_days": revenue.select(F.countDistinct("order_date")).first()[0]}))


def _land_corrections(days: list[str]) -> None:
    """A new batch re-sending 2 staged items of each of `days` with one more unit and a later updated_at."""
    from tests.late_batches import corrections, land_batch, next_batch_day
    from resources.spark import get_spark

    spark = get_spark()
    items = [r for d in days for r in corrections(spark, date.fromisoformat(d), 2)]
    land_batch(spark, items, next_batch_day())
    print(json.dumps({"items": len(items)}))


class Bench:
    def __init__(self, lake: Path, first: date, last: date):
        self.lake, self.first, self.last = lake, first, last
        self.home = lake / "dagster_home"
        self.env = {
            **os.environ,
            "LAKE_ROOT": str(lake),
            "DAGSTER_HOME": str(self.home),
            "PARTITION_START_DATE": first.isoformat(),
            "PARTITION_END_DATE": last.isoformat(),
            # One run for the whole history: the cost of a run is a JVM start and Dagster's per-run work.
            "BACKFILL_MAX_PARTITIONS_PER_RUN": str((last - first).days + 1),
            "LATE_DATA_SENSOR_INTERVAL_S": "86400",  # restatements are timed through the CLI, not the sensor
        }
        if last < TPCH_LAST_DAY:  # --days: the landing still ends in 1998; keep the corrected days in the window
            self.env["RESTATEMENT_WINDOW_DAYS"] = str((TPCH_LAST_DAY - first).days + 2)
        self.spark_apps = 0

    def run(self, *args: str) -> tuple[float, str]:
        """One process that starts one Spark application; returns (seconds, stdout)."""
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, *args], cwd=REPO, env=self.env, capture_output=True, text=True)
        self.spark_apps += 1
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return time.monotonic() - t0, done.stdout

    def daemon_backfill(self) -> tuple[float, int, float]:
        """(seconds from launch to completion, runs the backfill launched, seconds from its first run's launch to its
        last run's end)."""
        from tests.dagster_ui import DagsterDev

        dev = DagsterDev(self.home, env=self.env)
        try:
            dev.wait_until_up()
            from dagster import AssetSelection

            from assets_pkg.definitions import defs

            assets = [k.to_user_string() for k in AssetSelection.all().resolve(defs.resolve_asset_graph())]
            n = (self.last - self.first).days + 1
            partitions = [(self.first + timedelta(days=i)).isoformat() for i in range(n)]
            t0 = time.monotonic()
            backfill = dev.wait_for_backfill(dev.launch_backfill(assets, partitions), timeout=6 * 3600)
            elapsed = time.monotonic() - t0
            if backfill["status"] != "COMPLETED_SUCCESS":
                raise RuntimeError(f"daemon backfill ended {backfill['status']}: {backfill}")
            return elapsed, len(backfill["runs"]), self.runs_span([r["runId"] for r in backfill["runs"]])
        finally:
            dev.stop()

    def counts(self) -> dict:
        """Delta commits and data files written, over every table of the project's warehouse."""
        commits = files = 0
        for table in (self.lake / "warehouse").iterdir():
            commits += len(list((table / "_delta_log").glob("*.json")))
            files += sum(1 for _ in table.rglob("*.parquet") if "_delta_log" not in _.parts)
        return {"delta_commits": commits, "files_written": files}

    def runs_span(self, run_ids: list[str]) -> float:
        from tests.dagster_ui import instance_at

        with instance_at(self.home) as instance:
            stats = [instance.get_run_stats(run_id) for run_id in run_ids]
        return max(s.end_time for s in stats) - min(s.launch_time or s.start_time for s in stats)

    def runs_in_instance(self) -> int:
        from tests.dagster_ui import instance_at

        with instance_at(self.home) as instance:
            return instance.get_runs_count()


def step_seconds(home: Path) -> dict[str, dict[str, float]]:
    """Where each run's time went: per run (oldest first), its length and each step's, from the instance's event log
    (the first step of a run also pays for the run's JVM start)."""
    from tests.dagster_ui import instance_at

    with instance_at(home) as instance:
        steps = {}
        for run in reversed(instance.get_runs()):
            stats = instance.get_run_stats(run.run_id)
            label = f"{run.job_name} {run.run_id[:8]}"
            began = stats.launch_time or stats.start_time  # launched by the daemon, or executed in process
            steps[label] = {"run": round(stats.end_time - began, 1)} if stats.end_time and began else {}
            for step in instance.get_run_step_stats(run.run_id):
                if step.start_time and step.end_time:
                    steps[label][step.step_key] = round(step.end_time - step.start_time, 1)
        return steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float)
    parser.add_argument("--out", help="JSON file for the results")
    parser.add_argument("--days", type=int, help="partitions: only the first N days of TPC-H's history (tiny runs)")
    parser.add_argument("--lake", help="work folder (default: a new temporary folder)")
    parser.add_argument("--steps-of", metavar="LAKE", help="only print the run and step times of an earlier run's lake")
    parser.add_argument("--step", choices=["bare", "land-corrections"], help=argparse.SUPPRESS)
    parser.add_argument("--step-days", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps_of:
        print(json.dumps(step_seconds(Path(args.steps_of) / "dagster_home"), indent=2))
        return 0
    if args.scale is None or args.out is None:
        parser.error("--scale and --out are required")
    if args.step == "bare":
        _bare()
        return 0
    if args.step == "land-corrections":
        _land_corrections(args.step_days)
        return 0

    last = min(TPCH_LAST_DAY, FIRST_DAY + timedelta(days=args.days - 1)) if args.days else TPCH_LAST_DAY
    lake = Path(args.lake or tempfile.mkdtemp(prefix="bench-"))
    lake.mkdir(parents=True, exist_ok=True)
    bench = Bench(lake, FIRST_DAY, last)
    memory = PeakMemory()
    me = str(Path(__file__).resolve())
    result: dict = {"scale": args.scale, "days": (last - FIRST_DAY).days + 1, "lake": str(lake), "cpus": os.cpu_count()}

    def step(name: str, seconds: float) -> None:
        result[name] = round(seconds, 1)
        print(f"{name:24s} {seconds:8.1f} s", flush=True)

    step("import_s", bench.run("-m", "assets_pkg", "import-tpch", "--scale", str(args.scale))[0])
    step("bare_s", bench.run(me, "--scale", str(args.scale), "--out", "-", "--step", "bare")[0])
    seconds, runs, span = bench.daemon_backfill()
    bench.spark_apps += runs
    result["backfill_daemon_runs"] = runs
    step("backfill_daemon_s", seconds)
    step("daemon_overhead_s", seconds - span)
    step("backfill_inprocess_s", bench.run("-m", "assets_pkg", "backfill")[0])

    # The restatement path with no new data first: what the sensor runs right after a backfill. It also sets the
    # watermark, so the 3-day restatement below reads only the batches since then, as it would in production.
    seconds, out = bench.run("-m", "assets_pkg", "restate")
    result["noop_rewritten_partitions"] = sum(int(n) for n in re.findall(r"restated \w+: (\d+) day", out))
    step("noop_restate_s", seconds)

    # Three old days inside the restatement window (counted back from the newest batch) and the partitions.
    n_days = (last - FIRST_DAY).days + 1
    old_days = [(last - timedelta(days=min(d, n_days * share // 4))).isoformat() for d, share in ((60, 3), (45, 2), (30, 1))]
    bench.run(me, "--scale", str(args.scale), "--out", "-", "--step", "land-corrections", "--step-days", *old_days)
    seconds, out = bench.run("-m", "assets_pkg", "restate")
    restated = {t: int(n) for t, n in re.findall(r"restated (\w+): (\d+) day", out)}
    result["restate3_days_by_table"] = restated
    if restated.get("fact_order_item") != len(old_days):
        raise RuntimeError(f"restate should have rewritten the {len(old_days)} corrected days {old_days}: {out}")
    step("restate3_s", seconds)
    seconds, out = bench.run("-m", "assets_pkg", "restate")
    result["idle_rewritten_partitions"] = sum(int(n) for n in re.findall(r"restated \w+: (\d+) day", out))
    step("restate_idle_s", seconds)

    result.update(bench.counts())
    result["runs_launched"] = bench.runs_in_instance()
    result["run_steps_s"] = step_seconds(bench.home)
    result["spark_applications"] = bench.spark_apps
    result["peak_memory_mb"] = memory.stop()
    result["daemon_vs_bare"] = round(result["backfill_daemon_s"] / result["bare_s"], 2)
    result["restate3_vs_backfill"] = round(result["restate3_s"] / result["backfill_daemon_s"], 3)
    result["daemon_floor_vs_bare"] = round((result["bare_s"] + result["daemon_overhead_s"]) / result["bare_s"], 2)
    result["restate_idle_vs_backfill"] = round(result["restate_idle_s"] / result["backfill_daemon_s"], 3)
    for key in ("restate3_days_by_table", "noop_rewritten_partitions", "idle_rewritten_partitions", "delta_commits",
                "files_written", "runs_launched", "spark_applications", "peak_memory_mb", "daemon_vs_bare",
                "restate3_vs_backfill", "daemon_floor_vs_bare", "restate_idle_vs_backfill"):
        print(f"{key:24s} {result[key]}")
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for key in ("noop_rewritten_partitions", "idle_rewritten_partitions"):  # correctness, unlike the times
        if result[key]:
            print(f"FAILED: restate with no new data rewrote {result[key]} partitions ({key})", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
