"""Peer benchmark: the project's tables built by SQLMesh on Spark, from the same landing, over the same daily
partitions, as a full-history backfill with audits (keys not null and unique, reconciliation with the upstream table
per day), launched as SQLMesh's docs launch one: `sqlmesh plan --auto-apply`.

    python bench/peers/sqlmesh_peer.py --lake LAKE_ROOT --start 1992-01-01 --end 1992-03-31 --out result.json

Run it with .venv-peers/bin/python (`bash bench/peers/setup.sh`; bench/run.py runs it so). The models
(bench/peers/sqlmesh_project) are Python models calling the project's own builds, stored as Delta tables under
LAKE_ROOT/peer_sqlmesh/ (wiped first: a backfill from nothing). `peer_sqlmesh_s` is the `sqlmesh plan` process, launch
to exit. Then, untimed, its rows per table are compared with bench/run.py's bare job (LAKE_ROOT/bare/<table>) when that
has run: counts and the rows themselves (both differences empty).
"""

import argparse
import json
import os
import platform
import re
import runpy
import shutil
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROJECT = Path(__file__).resolve().parent / "sqlmesh_project"
SCHEMA = "sqlmesh_peer"


def run_plan(peer: Path, env: dict[str, str]) -> tuple[float, str]:
    """`sqlmesh plan` of prod, applied without prompts: it backfills every missing interval of the models, whose
    start and end are the partitions' (SQLMesh refuses --start/--end on a prod plan without restatements); returns
    (seconds, its output)."""
    sqlmesh = str(Path(sys.executable).parent / "sqlmesh")
    command = [sqlmesh, "-p", str(peer / "project"), "plan", "--auto-apply", "--no-prompts"]
    t0 = time.monotonic()
    done = subprocess.run(command, cwd=peer, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    (peer / "plan.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        tail = f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{tail}")
    return seconds, done.stdout


def audits_run(plan_output: str) -> dict[str, int]:
    """Per model, how many audits the plan ran and passed on its batches (SQLMesh's progress lines)."""
    flat = re.sub(r"\s+", " ", plan_output)
    found: dict[str, int] = {}
    for model, passed in re.findall(rf"{SCHEMA}\.(\w+) \[insert [^\]]*?audits passed (\d+)\]", flat):
        found[model] = found.get(model, 0) + int(passed)
    return found


def versions() -> dict[str, str]:
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    jars = sorted(p.name for p in (REPO / ".jars").glob("delta-*.jar"))
    found = {p: version(p) for p in ("sqlmesh", "sqlglot", "pyspark", "delta-spark", "duckdb", "pandas")}
    return {**found, "delta_jars": ", ".join(jars), "java": java, "python": platform.python_version()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lake", required=True, help="LAKE_ROOT with a landing written by the project")
    parser.add_argument("--start", required=True)
    parser.add_argument("--end", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--batch-size",
        type=int,
        help="days per SQLMesh batch (the models' batch_size); default: SQLMesh's, every missing interval in one "
        "batch per model. 366 is the project's default chunk (BACKFILL_MAX_PARTITIONS_PER_RUN)",
    )
    args = parser.parse_args()

    lake = Path(args.lake).resolve()
    peer = lake / "peer_sqlmesh"
    shutil.rmtree(peer, ignore_errors=True)
    shutil.copytree(PROJECT, peer / "project")  # SQLMesh writes its cache and logs beside its project: not the repo
    env = {
        **os.environ,
        "LAKE_ROOT": str(lake),
        "PARTITION_START_DATE": args.start,
        "PARTITION_END_DATE": args.end,
        "PEER_DIR": str(peer),
        "DAGSTER_HOME": os.environ.get("DAGSTER_HOME", str(peer / "dagster_home")),
        "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
        # SQLMesh's Spark engine starts a driver of its own: the project's settings for one, not a warm engine's.
        "SPARK_ENGINE": "in-process",
    }
    env.pop("PEER_BATCH_SIZE", None)
    if args.batch_size:
        env["PEER_BATCH_SIZE"] = str(args.batch_size)
    os.environ.update(env)  # the verification below reads the same settings and Spark config
    sys.path.insert(0, str(REPO))

    seconds, output = run_plan(peer, env)
    print(f"peer_sqlmesh_s {seconds:.1f}", flush=True)

    # Untimed: what it built, against the bare job's tables; one Spark session, configured as SQLMesh's was.
    from pyspark.sql import SparkSession
    from sqlmesh import Context

    conf = runpy.run_path(str(peer / "project" / "config.py"))["config"].gateways["spark"].connection.config
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.enableHiveSupport().getOrCreate()

    from assets_pkg.pipeline import pipeline

    rows, bare = {}, {}
    for table in pipeline.every_table:
        peer_df = spark.table(f"{SCHEMA}.{table}")
        rows[table] = peer_df.count()
        path = lake / "bare" / table
        if (path / "_delta_log").exists():
            bare_df = spark.read.format("delta").load(str(path))
            peer_df = peer_df.select(*bare_df.columns)
            bare[table] = {
                "bare_rows": bare_df.count(),
                "rows_only_in_peer": peer_df.exceptAll(bare_df).count(),
                "rows_only_in_bare": bare_df.exceptAll(peer_df).count(),
            }
            bare[table]["equal"] = (
                bare[table]["bare_rows"] == rows[table]
                and bare[table]["rows_only_in_peer"] == bare[table]["rows_only_in_bare"] == 0
            )

    passed = audits_run(output)
    context = Context(paths=str(peer / "project"))
    audits = [
        {
            "table": table,
            "audit": name,
            "args": {k: v.sql(dialect="spark") for k, v in audit_args.items()},
            "blocking": True,  # SQLMesh's default: a failing audit fails the batch and the plan
        }
        for table in rows
        for name, audit_args in context.get_model(f"{SCHEMA}.{table}").audits
    ]
    declared = {t: sum(a["table"] == t for a in audits) for t in rows}
    result = {
        "peer_sqlmesh_s": round(seconds, 1),
        "command": f"sqlmesh -p {peer / 'project'} plan --auto-apply --no-prompts",
        "days": f"{args.start}..{args.end}",
        "batch_size": args.batch_size,
        "table_format": os.environ.get("PEER_TABLE_FORMAT", "delta"),
        "rows_by_table": rows,
        "versions": versions(),
        "audits": audits,
        "audits_passed_by_table": passed,
        "every_audit_ran_and_passed": all(passed.get(t, 0) >= declared[t] for t in rows),
        "vs_bare": bare or "LAKE_ROOT/bare not found: run bench/run.py --step bare first",
        "equal_to_bare": bool(bare) and all(b["equal"] for b in bare.values()),
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("peer_sqlmesh_s", "rows_by_table", "equal_to_bare")}))
    return 0 if result["equal_to_bare"] and result["every_audit_ran_and_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
