"""What a one-day change's Delta commits cost at the least: the floor under a run's fixed cost.

A one-day run of the whole graph makes one `replaceWhere` commit per table it writes (its side tables included). This
makes as many small day-partitioned tables beside each other, each with a full history of days and commits behind
it, then replaces one day of each, one row per table, through the project's own partition overwrite
(`delta_io.overwrite_days`): first one table after the other, as a run commits, then all at once from as many
threads, the most that committing independent tables in parallel could buy. Spark is the profile's (the embedded
warm engine, or the cluster's Connect server with SPARK_REMOTE set).

Beside it, what sets the floor: the same commits at once as Delta's own `replaceWhere` write with nothing of the
project around it; the same again on tables of a few days, to tell the history's share from the commit's own; and a
new process importing the code location (`exact_backfills.definitions`), which every run's process pays before its first
Spark job.

    python bench/commit_floor.py --out bench/commit_floor.json [--rounds 5]

The file keeps one result per profile: a run in the other profile adds its own.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DAY = "order_date"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="JSON file for the results")
    parser.add_argument("--tables", type=int, default=8, help="tables a one-day change writes (default: the graph's)")
    parser.add_argument("--days", type=int, default=2406, help="days each table holds (TPC-H's history)")
    parser.add_argument("--history", type=int, default=25, help="one-day commits made before measuring")
    parser.add_argument("--short-days", type=int, default=10, help="days of the tables with a short history")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    lake = Path(tempfile.mkdtemp(prefix="commit-floor-", dir=os.environ.get("TMPDIR")))
    os.environ["LAKE_ROOT"] = str(lake)
    from pyspark.sql import functions as F

    from resources.delta_io import overwrite_days
    from resources.lake import table_path
    from resources.spark import get_spark

    try:
        spark = get_spark()
        first = date(1992, 1, 1)
        names = [f"table_{i}" for i in range(args.tables)]
        short = [f"short_{i}" for i in range(args.tables)]
        for tables, days in ((names, args.days), (short, args.short_days)):
            every_day = spark.range(days).select(F.date_add(F.lit(first), F.col("id").cast("int")).alias(DAY), "id")
            for name in tables:
                every_day.write.format("delta").partitionBy(DAY).save(table_path(name))
        days_of = {**dict.fromkeys(names, args.days), **dict.fromkeys(short, args.short_days)}

        def one_day(name: str, n: int, bare: bool = False) -> float:
            day = first + timedelta(days=n % days_of[name])
            rows = spark.range(1).select(F.lit(day).alias(DAY), F.lit(n).cast("long").alias("id"))
            t0 = time.monotonic()
            if bare:  # Delta's own write, nothing of the project's around it
                rows.write.format("delta").mode("overwrite").option("replaceWhere", f"{DAY} = '{day}'").save(
                    table_path(name)
                )
            else:
                overwrite_days(rows, name, DAY, [day], {"commit_floor": n, "table": name})
            return time.monotonic() - t0

        for n in range(args.history):
            for name in names + short:
                one_day(name, n)

        def at_once(tables: list[str], n: int, bare: bool = False) -> float:
            t0 = time.monotonic()
            list(pool.map(one_day, tables, [n] * len(tables), [bare] * len(tables)))
            return time.monotonic() - t0

        sequential, parallel, bare, short_history = [], [], [], []
        with ThreadPoolExecutor(max_workers=len(names)) as pool:
            for r in range(args.rounds):
                n = args.history + 4 * r
                t0 = time.monotonic()
                commits = [one_day(name, n) for name in names]
                sequential.append((time.monotonic() - t0, commits))
                parallel.append(at_once(names, n + 1))
                bare.append(at_once(names, n + 2, bare=True))
                short_history.append(at_once(short, n + 3))
    finally:
        shutil.rmtree(lake, ignore_errors=True)
    imports = [_imports_s() for _ in range(3)]
    result = {
        "profile": "cluster" if os.environ.get("SPARK_REMOTE") else "embedded",
        "cpus": os.cpu_count(),
        "tables": len(names),
        "days": args.days,
        "history_commits": args.history,
        "rounds": args.rounds,
        "commit_s": round(statistics.median(c for _, cs in sequential for c in cs), 3),
        "sequential_s": round(statistics.median(s for s, _ in sequential), 2),
        "parallel_s": round(statistics.median(parallel), 2),
        "bare_parallel_s": round(statistics.median(bare), 2),
        "short_days": args.short_days,
        "short_history_parallel_s": round(statistics.median(short_history), 2),
        "imports_s": round(statistics.median(imports), 2),
    }
    print(json.dumps(result, indent=2))
    out = Path(args.out)
    by_profile = json.loads(out.read_text()) if out.exists() else {}
    out.write_text(json.dumps({**by_profile, result["profile"]: result}, indent=2, sort_keys=True) + "\n")
    return 0


def _imports_s() -> float:
    """A new process importing the code location, as each run's process does first."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import exact_backfills.definitions"], cwd=REPO, check=True)
    return time.monotonic() - t0


if __name__ == "__main__":
    sys.exit(main())
