"""What the local lake's two file-system settings (resources/spark.py, local mode) save, each variant in a Spark
application of its own:

- the project's local file system (resources/java/NioLocalFileSystem.java) against Hadoop's, which runs `chmod` in a
  child process for every file and folder it creates, and `readlink` for every file it renames (each Delta commit);
- listing folders on the driver against Spark's default, a listing job of one task per folder above 32 folders.

    python bench/local_fs.py [--days 2406] [--rows-per-day 5] [--commits 50]

It writes a Delta table of DAYS day partitions (one file each), then overwrites one day of it COMMITS times (a
restatement's many small commits), and reads back a Parquet dataset of DAYS folders, as the landing is read.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STOCK = {
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.LocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.LocalFs",
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "32",
}


def _measure(days: int, rows_per_day: int, commits: int, folder: str) -> dict:
    from pyspark.sql import functions as F

    from resources.spark import get_spark

    spark = get_spark()
    df = (
        spark.range(days * rows_per_day)
        .select(
            F.expr(f"date_add(date'1992-01-01', cast(id % {days} as int))").alias("day"), F.col("id").alias("value")
        )
        .persist()
    )
    df.count()
    seconds = {}
    t = time.monotonic()
    df.repartition("day").write.format("delta").partitionBy("day").save(f"{folder}/delta")
    seconds["delta_write_s"] = time.monotonic() - t
    t = time.monotonic()
    for i in range(commits):
        day = f"date_add(date'1992-01-01', {i % days})"
        (
            df.where(f"day = {day}")
            .repartition("day")
            .write.format("delta")
            .mode("overwrite")
            .option("replaceWhere", f"day = {day}")
            .partitionBy("day")
            .save(f"{folder}/delta")
        )
    seconds["day_commits_s"] = time.monotonic() - t
    df.repartition("day").write.partitionBy("day").parquet(f"{folder}/parquet")
    t = time.monotonic()
    spark.read.schema("value bigint, day date").parquet(f"{folder}/parquet").count()
    seconds["folders_read_s"] = time.monotonic() - t
    return {k: round(v, 1) for k, v in seconds.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=2406)
    parser.add_argument("--rows-per-day", type=int, default=5)
    parser.add_argument("--commits", type=int, default=50)
    parser.add_argument("--variant", choices=["stock", "project"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        with tempfile.TemporaryDirectory() as folder:
            print(json.dumps(_measure(args.days, args.rows_per_day, args.commits, folder)))
        return 0
    print(f"{args.days} day folders, {args.rows_per_day} rows each, {args.commits} one-day commits")
    for variant in ("stock", "project"):
        env = {**os.environ, "SPARK_CONF": json.dumps(STOCK if variant == "stock" else {})}
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--variant",
                variant,
                "--days",
                str(args.days),
                "--rows-per-day",
                str(args.rows_per_day),
                "--commits",
                str(args.commits),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        result = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{variant:8} " + "  ".join(f"{k} {v:6.1f}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
