"""What a user's backfills cost with the defaults, against a bare PySpark application doing the same work, on TPC-H.

    python bench/run.py --scale 1 --out bench/sf1.json --docs          # docs/performance.md's tables
    python bench/run.py --scale 1 --profile cluster --out bench/sf1-cluster.json --docs
    python bench/run.py --scale 10 --only-backfill --no-peers --out bench/sf10.json --docs   # about an hour
    python bench/run.py --scale 0.01 --days 31 --out /tmp/tiny.json    # minutes: proves the harness end to end
    python bench/run.py --steps-of LAKE                                  # where the runs' time went, run by run

Each step in its own process, as users run them:
  import     import-tpch through the landing contract
  bare       one Spark application building every table of the orders pipeline (quarantine included) from the same
             landing with the same transforms, written by day to Delta: no checks, no orchestration. What the data
             costs.
  peer       (embedded) SQLMesh building the same tables from the same landing over every day, with its audits of
             keys and reconciliation (bench/peers/sqlmesh_peer.py, in .venv-peers made by bench/peers/setup.sh);
             its tables must equal the bare job's row for row. `--no-peers` leaves it out.
  backfill   `dagster dev`, then a backfill of every asset over every day launched with the GraphQL mutation the UI's
             dialog sends, with the configured chunk size (BACKFILL_MAX_PARTITIONS_PER_RUN, default 3660), timed from
             launch to completion. Split into the runs' own time and the daemon loop's (the rest).
  check      `check` over every day once the sensor's first restatement after the backfill has run: every check of every
             table on every published day, recorded in Dagster; it must find nothing failing
  landed     the sensor's first restatement after the backfill (nothing new: it must rewrite nothing), then a batch
             correcting one old day landed while `dagster dev` runs: seconds from its files being in the landing
             until the sensor's restatement has published it, with the sensor's default interval.
  short      `backfill` of 31 built days (fewer with --days) in one run from the command line, in its own process as a
             run is: with the backfill's runs, a run's fixed cost and its cost per day (what the default chunk is
             chosen from)
  restate3   a batch correcting items on 3 old days, then `restate`, timed from the process start to the last check
  idle       `restate` again, with nothing new: what the restatement path costs before it has any day to write
  code       a fix to one mart's transform (a copy of the project whose code differs): `plan` over every day, then
             `promote`, with the days each rewrote; then that mart's own `backfill` over every day with the fixed code,
             for scale; then a rewrite of the fact's code that changes no row: `plan` and `promote`, which must write
             no published table

`--profile cluster` runs it all in the production profile (`bash scripts/cluster-profile.sh start` first): Spark over
Connect, Dagster on PostgreSQL (a database of the bench's own). `--docs` regenerates docs/performance.md's tables
from the JSON files in bench/ (bench/report.py).
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
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FIRST_DAY, TPCH_LAST_DAY = date(1992, 1, 1), date(1998, 8, 2)
# The demo's landing (`generate`, its defaults: 200 order items a day), over the demo's partitions.
DEMO_FIRST_DAY, DEMO_LAST_DAY = date(2025, 1, 1), date(2025, 3, 31)


class PeakMemory:
    """Peak resident memory of this process and all its descendants (Python, JVMs, dagster dev), sampled; with
    `services`, of the processes it names at each sample and their descendants too (the warm engine, the cluster
    profile's Spark and PostgreSQL)."""

    def __init__(self, interval: float = 0.5, services: Callable[[], list[int]] = list):
        self.peak_mb, self._stop = 0.0, threading.Event()
        self._services = services
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval):
        while not self._stop.wait(interval):
            self.peak_mb = max(self.peak_mb, self._tree_rss_mb())

    def _tree_rss_mb(self) -> float:
        out = subprocess.run(["ps", "-eo", "pid=,ppid=,rss="], capture_output=True, text=True).stdout
        procs = [tuple(int(x) for x in line.split()) for line in out.splitlines() if line.strip()]
        children: dict[int, list[tuple[int, int]]] = {}
        for pid, ppid, rss in procs:
            children.setdefault(ppid, []).append((pid, rss))
        own = {pid: rss for pid, _, rss in procs}
        roots = [os.getpid(), *self._services()]
        total, stack = sum(own.get(pid, 0) for pid in roots), list(roots)
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
    """One Spark application: the rows of every table of the project, built from the same landing with the same
    transforms, each written by day in one Delta overwrite: no checks, no audit, no orchestration."""
    from assets_pkg.pipeline import pipeline
    from exact_backfills.builds import build
    from resources.lake import lake_root
    from resources.spark import get_spark

    spark = get_spark()
    all_days = pipeline.partitions.days
    out = Path(lake_root()) / "bare"

    def write(df, table):
        column = pipeline.day_columns[table]
        df.repartition(column).write.format("delta").mode("overwrite").partitionBy(column).save(str(out / table))

    def read(table, days):  # each upstream table as written above: the whole history, as every build asks for here
        return spark.read.format("delta").load(str(out / table))

    rows = {}
    for table in pipeline.publish_order:
        built = build(spark, pipeline, pipeline.by_name[table], all_days, read)
        for side, side_df in built.side_tables.items():
            write(side_df, side)
        write(built.table, table)
        built.unpersist()  # a warm engine's cache is shared: a later equal read would plan this one's
        rows[table] = spark.read.format("delta").load(str(out / table)).count()
    print(json.dumps(rows))


def _table_days() -> dict[str, dict[str, float]]:
    """Per published table (side tables included), its live data files and bytes per day it holds, as Delta's
    DESCRIBE DETAIL counts them: what each day's rewrites leave for a reader (replaced files wait for a vacuum)."""
    from assets_pkg.pipeline import pipeline
    from resources.lake import table_path
    from resources.spark import get_spark

    spark = get_spark()
    found: dict[str, dict[str, float]] = {}
    for table, column in pipeline.day_columns.items():
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{table_path(table)}`").first()
        days = spark.read.format("delta").load(table_path(table)).select(column).distinct().count()
        if detail is not None and days:
            found[table] = {"files": round(detail["numFiles"] / days, 2), "bytes": round(detail["sizeInBytes"] / days)}
    return found


def _peer_sqlmesh(bench: "Bench") -> dict:
    """SQLMesh doing the same full-history build on the same landing and days, with its audits
    (bench/peers/sqlmesh_peer.py), in an environment of its own (bench/peers/setup.sh). Local Spark only: its Spark
    engine builds a session of its own, not a Spark Connect client."""
    subprocess.run(["bash", str(REPO / "bench" / "peers" / "setup.sh")], check=True)
    out = bench.lake / "peer_sqlmesh.json"
    peer = [str(REPO / ".venv-peers" / "bin" / "python"), str(REPO / "bench" / "peers" / "sqlmesh_peer.py")]
    days = ["--start", bench.first.isoformat(), "--end", bench.last.isoformat()]
    done = subprocess.run(
        [*peer, "--lake", str(bench.lake), *days, "--out", str(out)],
        cwd=REPO,
        env=bench.env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:  # it failed, or built other rows than the bare job, or an audit did not pass
        raise RuntimeError(f"the SQLMesh peer failed ({out}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    found = json.loads(out.read_text())
    print(f"{'peer_sqlmesh_s':24s} {found['peer_sqlmesh_s']:8.1f} s", flush=True)
    return {
        "peer_sqlmesh_s": found["peer_sqlmesh_s"],
        # Its tables equal the bare job's row for row, and every audit ran on every batch and passed.
        "peer_sqlmesh_equal_to_bare": found["equal_to_bare"],
        "peer_sqlmesh_audits_passed": found["every_audit_ran_and_passed"],
        "peer_sqlmesh_versions": {k: found["versions"][k] for k in ("sqlmesh", "pyspark", "delta-spark")},
    }


def _land_corrections(days: list[str]) -> None:
    """A new batch re-sending 2 staged items of each of `days` with one more unit and a later updated_at."""
    from bench.harness import corrections, land_batch, next_batch_day
    from resources.spark import get_spark

    spark = get_spark()
    items = [r for d in days for r in corrections(spark, date.fromisoformat(d), 2)]
    land_batch(spark, items, next_batch_day())
    print(json.dumps({"items": len(items)}))


class Bench:
    def __init__(self, lake: Path, first: date, last: date, profile: str, shared_engine: Path | None = None):
        self.lake, self.first, self.last, self.profile = lake, first, last, profile
        self.home = lake / "dagster_home"
        # A warm engine already up (the tests'), used as it is and left running; otherwise the bench's own.
        self.engine_home, self.shared_engine = shared_engine or lake / "engine", shared_engine is not None
        # What a user gets: the default chunk size and sensor interval; only the lake, the instance and the days are
        # the bench's own.
        self.env = {
            **os.environ,
            "LAKE_ROOT": str(lake),
            "DAGSTER_HOME": str(self.home),
            "PARTITION_START_DATE": first.isoformat(),
            "PARTITION_END_DATE": last.isoformat(),
        }
        for setting in (
            "BACKFILL_MAX_PARTITIONS_PER_RUN",
            "LATE_DATA_SENSOR_INTERVAL_S",
            "SPARK_REMOTE",
            "DAGSTER_POSTGRES_URL",
            "DAGSTER_EVENT_BATCH_SIZE",
            "SPARK_CODEGEN",
            # PySpark's own flags of a process with a Spark Connect session: each step decides for itself.
            "SPARK_CONNECT_MODE_ENABLED",
            "SPARK_LOCAL_REMOTE",
        ):
            self.env.pop(setting, None)
        if profile == "cluster":
            self.env.update(_cluster_profile())
        else:  # a warm engine of the bench's own, started cold by its first step as a user's first command starts it
            self.env.pop("SPARK_ENGINE", None)
            self.env["SPARK_ENGINE_HOME"] = str(self.engine_home)
        # This process reads the same landing and instance (landing_state, the runs' records).
        for key in (
            "LAKE_ROOT",
            "DAGSTER_HOME",
            "DAGSTER_POSTGRES_URL",
            "PGPASSFILE",
            "PARTITION_START_DATE",
            "PARTITION_END_DATE",
        ):
            if key in self.env:
                os.environ[key] = self.env[key]
        self.spark_apps = 0

    def run(self, *args: str, project: Path = REPO, **settings: str) -> tuple[float, str]:
        """One process that starts one Spark application, with the code of `project` (a copy of the project whose
        code differs, or the repository's) and `settings` beside the bench's; returns (seconds, stdout)."""
        t0 = time.monotonic()
        env = {**self.env, **settings}
        if project != REPO:  # its modules imported from the copy; the jars stay the repository's
            env = {**env, "PYTHONPATH": str(project), "DELTA_JARS_DIR": str(REPO / ".jars")}
        done = subprocess.run([sys.executable, *args], cwd=project, env=env, capture_output=True, text=True)
        self.spark_apps += 1
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return time.monotonic() - t0, done.stdout

    def value(self, code: str) -> str:
        """What `code` prints last, run in a process on the bench's lake (no Spark application)."""
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, env=self.env, capture_output=True, text=True, check=True
        )
        return done.stdout.split()[-1]

    def engine_pids(self) -> list[int]:
        """The warm engine's process, once a step has started it (it outlives the step that started it)."""
        from resources import engine

        running = engine.running(self.engine_home)
        return [running.pid] if running else []

    def stop_engine(self) -> None:
        from resources import engine

        if not self.shared_engine:
            engine.stop(self.engine_home)

    def instance(self):
        from bench.harness import instance_at

        return instance_at(self.home)

    def runs_time(self, run_ids: list[str]) -> float:
        """The runs' own time, launch to end, summed (one run at a time: dagster.yaml's run queue)."""
        with self.instance() as instance:
            stats = [instance.get_run_stats(run_id) for run_id in run_ids]
        return sum(s.end_time - (s.launch_time or s.start_time) for s in stats)

    def restatement(self, dev, state: str, timeout: float = 3600) -> dict:
        """The sensor's restatement run for landing `state`, once it has finished."""
        from exact_backfills.dagster_names import LANDING_STATE_TAG, RESTATE_JOB

        run = dev.wait_for_run(RESTATE_JOB, (LANDING_STATE_TAG, state), timeout=timeout)
        if run["status"] != "SUCCESS":
            raise RuntimeError(f"the sensor's restatement {run['runId']} ended {run['status']}")
        return run

    def published_commits(self) -> int:
        """Delta commits of the published tables (the orders pipeline's tables and their side tables)."""
        from assets_pkg.pipeline import pipeline

        logs = [self.lake / "warehouse" / t / "_delta_log" for t in pipeline.every_table]
        return sum(len(list(log.glob("*.json"))) for log in logs)

    def counts(self) -> dict:
        """Delta commits and data files written, over every table of the project's warehouse."""
        commits = files = 0
        for table in (self.lake / "warehouse").iterdir():
            commits += len(list((table / "_delta_log").glob("*.json")))
            files += sum(1 for _ in table.rglob("*.parquet") if "_delta_log" not in _.parts)
        return {"delta_commits": commits, "files_written": files}


def code_change(bench: Bench, result: dict, step) -> None:
    """A fixed mart transform planned and promoted over every day, beside that mart's own backfill; then a change of
    the fact's code that alters no row, planned and promoted: it must write no published table."""
    from bench.harness import FACT_NET_REWRITTEN, FEATURE_ROUNDING_FIX, project_with

    mart = "customer_daily_features"
    fixed = project_with(bench.lake / "code-fixed", FEATURE_ROUNDING_FIX)
    seconds, out = bench.run("-m", "assets_pkg", "plan", "--json", project=fixed)
    plan = json.loads(out)
    step("plan_s", seconds)
    result["plan_days_changed"] = {t: len(p["changed_days"]) for t, p in plan["tables"].items()}
    commits = bench.published_commits()
    seconds, _ = bench.run("-m", "assets_pkg", "promote", plan["plan_id"], project=fixed)
    step("promote_s", seconds)
    result["promote_commits"] = bench.published_commits() - commits
    seconds, _ = bench.run("-m", "assets_pkg", "backfill", "--select", mart, project=fixed)
    step("mart_backfill_s", seconds)
    result["plan_vs_mart_backfill"] = round(result["plan_s"] / result["mart_backfill_s"], 2)

    # On top of the fix: the same fact, computed by other code.
    unchanged = project_with(bench.lake / "code-unchanged", FACT_NET_REWRITTEN, base=fixed)
    commits = bench.published_commits()
    seconds, out = bench.run("-m", "assets_pkg", "plan", "--json", project=unchanged)
    plan = json.loads(out)
    step("plan_unchanged_s", seconds)
    result["plan_unchanged_days_changed"] = sum(len(p["changed_days"]) for p in plan["tables"].values())
    seconds, _ = bench.run("-m", "assets_pkg", "promote", plan["plan_id"], project=unchanged)
    step("promote_unchanged_s", seconds)
    result["promote_unchanged_commits"] = bench.published_commits() - commits


def _service_pids() -> list[int]:
    """The cluster profile's long-lived processes: Spark's master, worker (its executors are its children) and
    Connect server, PostgreSQL's server (its backends are its children) and PgBouncer."""
    files = [
        *(REPO / ".cluster").glob("*.pid"),
        REPO / ".postgres" / "pgbouncer.pid",
        REPO / ".postgres" / "data" / "postmaster.pid",
    ]
    return [int(f.read_text().split()[0]) for f in files if f.exists()]


def _spark_workers() -> int:
    """The cluster profile's running Spark workers (scripts/spark-cluster.sh's pid files)."""
    alive = 0
    for pid_file in (REPO / ".cluster").glob("worker*.pid"):
        try:
            os.kill(int(pid_file.read_text().split()[0]), 0)
            alive += 1
        except (OSError, ValueError):
            pass
    return alive


def _cluster_profile() -> dict[str, str]:
    """The production profile's services (scripts/cluster-profile.sh), with a PostgreSQL database of the bench's own."""
    env_file = REPO / ".cluster" / "profile.env"
    if (
        subprocess.run(["bash", "scripts/cluster-profile.sh", "status"], cwd=REPO, capture_output=True).returncode
        or not env_file.exists()
    ):
        raise SystemExit("--profile cluster: start it first: bash scripts/cluster-profile.sh start")
    found = dict(re.findall(r"export (\w+)=(\S+)", env_file.read_text()))
    database = f"bench_{int(time.time())}"
    subprocess.run(
        ["bash", "scripts/postgres.sh", "psql", f"CREATE DATABASE {database} OWNER dagster"], cwd=REPO, check=True
    )
    return {
        **{k: v for k, v in found.items() if k not in ("DAGSTER_HOME", "LAKE_ROOT")},
        "DAGSTER_POSTGRES_URL": found["DAGSTER_POSTGRES_URL"].rsplit("/", 1)[0] + "/" + database,
    }


def _restated_partitions(bench: Bench, run_id: str) -> int:
    """Days the run materialized, over every table."""
    from dagster import DagsterEventType

    with bench.instance() as instance:
        return len(
            instance.get_records_for_run(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION, limit=100000).records
        )


def step_seconds(home: Path) -> dict[str, dict[str, float]]:
    """Where each run's time went: per run (oldest first), its length and each step's, from the instance's event log
    (the first step of a run also pays for the run's JVM start)."""
    from bench.harness import instance_at

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


def run_phases(home: Path, run_ids: list[str]) -> dict[str, float]:
    """Where the runs' time went, summed over `run_ids`, from the instance's event log: `planning`, from a run's
    creation until it is queued (Dagster stores its planned check results; a run the command line executes is not
    queued: until it starts); `starting`, until its step starts (the queue, a process and its imports); `spark`, until
    the step's first output (every table built and checked, the first committed); `events`, until the step ends
    (every table's days recorded in Dagster, while the tables after each are committed)."""
    from dagster import DagsterEventType

    from bench.harness import instance_at

    def first(instance, run_id: str, *kinds: DagsterEventType) -> float:
        for kind in kinds:
            records = instance.get_records_for_run(run_id, of_type=kind, limit=1).records
            if records:
                return records[0].event_log_entry.timestamp
        raise RuntimeError(f"run {run_id} has no {' or '.join(k.value for k in kinds)} event")

    phases = dict.fromkeys(("planning", "starting", "spark", "events"), 0.0)
    with instance_at(home) as instance:
        for run_id in run_ids:
            record = instance.get_run_record_by_id(run_id)
            if record is None:
                raise RuntimeError(f"no run {run_id}")
            created = record.create_timestamp.timestamp()
            queued = first(instance, run_id, DagsterEventType.PIPELINE_ENQUEUED, DagsterEventType.PIPELINE_START)
            started, output, ended = (
                first(instance, run_id, kind)
                for kind in (DagsterEventType.STEP_START, DagsterEventType.STEP_OUTPUT, DagsterEventType.STEP_SUCCESS)
            )
            phases["planning"] += queued - created
            phases["starting"] += started - queued
            phases["spark"] += output - started
            phases["events"] += ended - output
    return {name: round(seconds, 1) for name, seconds in phases.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float)
    parser.add_argument("--out", help="JSON file for the results")
    parser.add_argument("--days", type=int, help="partitions: only the first N days of TPC-H's history (tiny runs)")
    parser.add_argument("--lake", help="work folder (default: a new temporary folder)")
    parser.add_argument(
        "--profile",
        choices=["embedded", "cluster"],
        default="embedded",
        help="embedded: local Spark, Dagster on SQLite (the default); cluster: scripts/cluster-profile.sh",
    )
    parser.add_argument(
        "--docs", action="store_true", help="then regenerate docs/performance.md's tables (bench/report.py)"
    )
    parser.add_argument(
        "--no-peers", dest="peers", action="store_false", help="leave out the peers' build (bench/peers)"
    )
    parser.add_argument(
        "--only-backfill",
        action="store_true",
        help="stop after the full-history backfill: import, bare job, backfill and peak memory (a large scale's run)",
    )
    parser.add_argument(
        "--demo",
        action="store_true",
        help="the demo's lake (`generate`: 90 days of 200 order items) instead of TPC-H: its import, the bare job, "
        "the backfill, the sensor's first restatement and `check` (--scale names it in the results)",
    )
    parser.add_argument(
        "--shared-engine",
        metavar="HOME",
        type=Path,
        help="(embedded) the warm engine of this folder, already up with the same settings, used as it is and left "
        "running (the tests' own): no cold start of the bench's, so import_s and the peak memory are not the bench's",
    )
    parser.add_argument("--steps-of", metavar="LAKE", help="only print the run and step times of an earlier run's lake")
    parser.add_argument("--step", choices=["bare", "land-corrections", "table-days"], help=argparse.SUPPRESS)
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
    if args.step == "table-days":
        print(json.dumps(_table_days()))
        return 0

    first, final = (DEMO_FIRST_DAY, DEMO_LAST_DAY) if args.demo else (FIRST_DAY, TPCH_LAST_DAY)
    last = min(final, first + timedelta(days=args.days - 1)) if args.days else final
    lake = Path(args.lake or tempfile.mkdtemp(prefix="bench-"))
    lake.mkdir(parents=True, exist_ok=True)
    bench = Bench(lake, first, last, args.profile, args.shared_engine)
    try:
        return measure(args, bench, last)
    finally:
        bench.stop_engine()


def measure(args: argparse.Namespace, bench: Bench, last: date) -> int:
    """Every step of the bench (the module's docstring), in order; the figures to args.out."""
    memory = PeakMemory(services=_service_pids if args.profile == "cluster" else bench.engine_pids)
    me = str(Path(__file__).resolve())
    from resources.settings import ENVIRONMENT

    result: dict = {
        "profile": args.profile,
        "scale": args.scale,
        "days": (last - bench.first).days + 1,
        "landing": "demo" if args.demo else "tpch",
        "cpus": os.cpu_count(),
        # Where the embedded profile's Spark runs: the warm engine (the default), or a driver in each process.
        "spark_engine": "connect" if args.profile == "cluster" else ENVIRONMENT["spark_engine"][1],
        "steps": "backfill" if args.only_backfill else "all",
    }
    if args.profile == "cluster":
        result["spark_engine"] = f"connect, {_spark_workers()} workers"

    def step(name: str, seconds: float) -> None:
        result[name] = round(seconds, 1)
        print(f"{name:24s} {seconds:8.1f} s", flush=True)

    # With --days, only the orders of those days land: the landing ends where the partitions do, as a short history's.
    through = ["--through", last.isoformat()] if last < TPCH_LAST_DAY else []
    landed = ["generate"] if args.demo else ["import-tpch", "--scale", str(args.scale), *through]
    step("import_s", bench.run("-m", "assets_pkg", *landed)[0])
    # The days one backfill run covers, as the backfill chooses them from what the landing holds.
    sources = "from assets_pkg.pipeline import pipeline; from exact_backfills import landing; "
    result["chunk_days"] = int(bench.value(sources + "print(landing.days_per_backfill_run(pipeline))"))
    result["landed_bytes"] = int(
        bench.value(sources + "print(sum(sum(landing.batch_bytes(s).values()) for s in pipeline.sources))")
    )

    def bare_and_peers() -> None:
        # After the backfill: the landing index is the machinery's, built by the first build that reads the landing,
        # which the backfill is then, as on a user's new lake; the bare job and the peer find it built.
        seconds, out = bench.run(me, "--scale", str(args.scale), "--out", "-", "--step", "bare")
        step("bare_equal_work_s", seconds)
        result["rows_by_table"] = json.loads(out.strip().splitlines()[-1])
        if args.profile == "embedded" and args.peers and not args.demo:
            result.update(_peer_sqlmesh(bench))

    from dagster import AssetSelection

    from assets_pkg.pipeline import pipeline
    from bench.harness import DagsterDev
    from exact_backfills.automation import landing_state
    from exact_backfills.location import definitions_of

    defs = definitions_of(pipeline)

    dev = DagsterDev(bench.home, env=bench.env)
    try:
        dev.wait_until_up()
        assets = [k.to_user_string() for k in AssetSelection.all().resolve(defs.resolve_asset_graph())]
        partitions = [(bench.first + timedelta(days=i)).isoformat() for i in range(result["days"])]
        t0 = time.monotonic()
        backfill = dev.wait_for_backfill(dev.launch_backfill(assets, partitions), timeout=6 * 3600)
        seconds = time.monotonic() - t0
        if backfill["status"] != "COMPLETED_SUCCESS":
            raise RuntimeError(f"the backfill ended {backfill['status']}: {backfill}")
        run_ids = [r["runId"] for r in backfill["runs"]]
        bench.spark_apps += len(run_ids)
        result["runs"] = len(run_ids)
        step("backfill_ui_s", seconds)
        in_runs = bench.runs_time(run_ids)
        step("daemon_loop_s", seconds - in_runs)
        result["backfill_phases_s"] = run_phases(bench.home, run_ids)
        result["run_mean_s"] = round(in_runs / len(run_ids), 1)
        # The sensor may have requested its first restatement during the backfill, queued behind it for the lake's
        # writes: it ends before the UI stops, which would interrupt it as it starts. Nothing runs beside the bare job.
        dev.wait_until_idle()
        dev.stop()
        bare_and_peers()
        # What a run costs beyond its data: the runs' own time, less the bare job's, per run.
        step("run_fixed_cost_s", (in_runs - result["bare_equal_work_s"]) / len(run_ids))
        if args.only_backfill:
            return finish(args, bench, result, memory)
        dev = DagsterDev(bench.home, env=bench.env)
        dev.wait_until_up()

        # The sensor's first restatement after the backfill: nothing new, it must rewrite nothing.
        first = bench.restatement(dev, landing_state(pipeline))
        bench.spark_apps += 1
        result["sensor_idle_rewritten_partitions"] = _restated_partitions(bench, first["runId"])

        # Every check of every table on every day the backfill published, as an operator runs it to know the lake is
        # right: one checks-only run, every result recorded in Dagster. It must find nothing failing.
        step("check_s", bench.run("-m", "assets_pkg", "check")[0])
        if args.demo:
            return finish(args, bench, result, memory)

        # A correction of one old day, landed while the daemon runs: from the moment its batch is in the landing (the
        # process writing it has ended) until the sensor's restatement has published it.
        old_day = (last - timedelta(days=min(30, result["days"] // 4))).isoformat()
        bench.run(me, "--scale", str(args.scale), "--out", "-", "--step", "land-corrections", "--step-days", old_day)
        t0 = time.monotonic()
        bench.restatement(dev, landing_state(pipeline))
        bench.spark_apps += 1
        step("landed_to_published_s", time.monotonic() - t0)
    finally:
        dev.stop()

    # One run of (up to) 31 built days, beside the backfill's runs of the default chunk: a run's cost against its days.
    result["short_run_days"] = short = min(31, result["days"])
    rerun = bench.first + timedelta(days=min(365, result["days"] - short))
    step(
        "short_run_s",
        bench.run(
            "-m",
            "assets_pkg",
            "backfill",
            "--start",
            rerun.isoformat(),
            "--end",
            (rerun + timedelta(days=short - 1)).isoformat(),
            "--max-partitions-per-run",
            str(short),
        )[0],
    )
    # A one-day backfill, what an operator launches most, of a built day outside the run above: process start to end,
    # and where its run's time went.
    if rerun > bench.first:
        one_day = (rerun - timedelta(days=1)).isoformat()
    else:  # the short run covered the first days: the day after it, or its last when it covered them all
        one_day = (rerun + timedelta(days=min(short, result["days"] - 1))).isoformat()
    seconds, out = bench.run("-m", "assets_pkg", "backfill", "--start", one_day, "--end", one_day)
    step("day_run_s", seconds)
    result["day_run_phases_s"] = run_phases(bench.home, re.findall(r"\(run ([0-9a-f-]{36})\)", out))
    # The same day again, compiled as a large run is: what evaluating a small run interpreted buys (SPARK_CODEGEN).
    step(
        "day_run_compiled_s",
        bench.run("-m", "assets_pkg", "backfill", "--start", one_day, "--end", one_day, SPARK_CODEGEN="1")[0],
    )

    # Three old days inside the restatement window (counted back from the newest batch) and the partitions.
    n_days = result["days"]
    old_days = [
        (last - timedelta(days=min(d, n_days * share // 4))).isoformat() for d, share in ((60, 3), (45, 2), (20, 1))
    ]
    bench.run(me, "--scale", str(args.scale), "--out", "-", "--step", "land-corrections", "--step-days", *old_days)
    seconds, out = bench.run("-m", "assets_pkg", "restate")
    restated = {t: int(n) for t, n in re.findall(r"restated (\w+): (\d+) day", out)}
    result["restate3_days_by_table"] = restated
    if restated.get("fact_order_item") != len(set(old_days)):
        raise RuntimeError(f"restate should have rewritten the {len(old_days)} corrected days {old_days}: {out}")
    step("restate3_s", seconds)
    commits = bench.counts()["delta_commits"]
    seconds, out = bench.run("-m", "assets_pkg", "restate")
    result["idle_rewritten_partitions"] = sum(int(n) for n in re.findall(r"restated \w+: (\d+) day", out))
    result["idle_commits"] = bench.counts()["delta_commits"] - commits
    step("restate_idle_s", seconds)

    code_change(bench, result, step)
    return finish(args, bench, result, memory)


def finish(args: argparse.Namespace, bench: Bench, result: dict, memory: PeakMemory) -> int:
    """The whole run's figures (of the steps it ran) to args.out; 1 when a step that must write nothing wrote."""
    result.update(bench.counts())
    out = bench.run(str(Path(__file__).resolve()), "--scale", "0", "--out", "-", "--step", "table-days")[1]
    by_table = json.loads(out.strip().splitlines()[-1])
    result["files_per_table_day"] = {t: f["files"] for t, f in by_table.items()}
    result["bytes_per_table_day"] = {t: f["bytes"] for t, f in by_table.items()}
    result["run_steps_s"] = step_seconds(bench.home)
    result["spark_applications"] = bench.spark_apps
    result["peak_memory_mb"] = memory.stop()
    result["backfill_vs_bare"] = round(
        (result["backfill_ui_s"] - result["daemon_loop_s"]) / result["bare_equal_work_s"], 2
    )
    if "restate3_s" in result:
        result["restate3_vs_backfill"] = round(result["restate3_s"] / result["backfill_ui_s"], 3)
    if "check_s" in result:
        result["check_vs_backfill"] = round(result["check_s"] / result["backfill_ui_s"], 3)
    for key in (
        "runs",
        "restate3_days_by_table",
        "sensor_idle_rewritten_partitions",
        "idle_rewritten_partitions",
        "delta_commits",
        "files_written",
        "files_per_table_day",
        "spark_applications",
        "peak_memory_mb",
        "backfill_vs_bare",
        "restate3_vs_backfill",
        "check_vs_backfill",
        "plan_days_changed",
        "promote_commits",
        "plan_vs_mart_backfill",
    ):
        if key in result:
            print(f"{key:24s} {result[key]}")
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    if args.docs:
        from bench.report import write_docs

        print(f"wrote {write_docs()}")
    for key, what in (
        ("sensor_idle_rewritten_partitions", "a restatement with no new data"),
        ("idle_rewritten_partitions", "a restatement with no new data"),
        ("idle_commits", "a restatement with no new data"),
        ("plan_unchanged_days_changed", "a change of code that alters no row"),
        ("promote_unchanged_commits", "a change of code that alters no row"),
    ):  # correctness, unlike the times
        if result.get(key):
            print(f"FAILED: {what} wrote: {key} = {result[key]}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
