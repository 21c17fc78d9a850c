"""What Dagster's event log costs a range run, without Spark: N daily partitions of a chain of 6 assets in one run
(BackfillPolicy.single_run), each logging K check results per day, on a fresh instance per storage.

    python bench/event_log.py --days 31 --checks 5 --out bench/event_log.json       # docs/performance.md's table
    python bench/event_log.py --days 2406 --checks 5 --create-run   # only create the run, as the daemon does

The postgres storages need `bash scripts/postgres.sh start` and DAGSTER_POSTGRES_URL (PgBouncer's port) or
DAGSTER_POSTGRES_DIRECT_URL (the server's own port, 55433); each measurement gets a new database.
"""

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from datetime import date, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dagster import (  # noqa: E402
    AssetCheckEvaluation,
    AssetCheckSpec,
    AssetSpec,
    BackfillPolicy,
    DagsterInstance,
    DailyPartitionsDefinition,
    Definitions,
    MaterializeResult,
    define_asset_job,
    in_process_executor,
    multi_asset,
)

from exact_backfills.dagster_private import (  # noqa: E402
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    create_execution_plan,
)
from exact_backfills.event_log_writes import EVENT_BATCH_SIZE, EVENT_BATCH_SIZE_VARIABLE  # noqa: E402

warnings.filterwarnings("ignore")  # partitioned checks and BackfillPolicy are preview/beta in Dagster 1.13

STORAGE_LABELS = {
    "sharded": "Dagster's SQLite default",
    "sharded-planned-per-run": "the same, with DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS set",
    "project": "Dagster's SQLite files, written through the project's storage class with the code location's event "
    "batch size: the embedded profile's",
    "consolidated": "one SQLite file, a private class path: not used",
    "postgres": "DAGSTER_POSTGRES_URL as given: through PgBouncer with scripts/postgres.sh",
    "postgres-direct": "the same PostgreSQL, without PgBouncer",
    "postgres-batched": "through PgBouncer, the project's storage class and event batch size: the production profile's",
    "postgres-async": "the same, and synchronous_commit=off on the instance's database",
}
# Dagster's settings each storage is measured with (environment variables of the process that runs and creates the
# run): the project's storages with the event batch size its code location sets (dagster_private.py).
PROJECT_SETTINGS = {EVENT_BATCH_SIZE_VARIABLE: EVENT_BATCH_SIZE}
SETTINGS = {
    "sharded-planned-per-run": {"DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS": "true"},
    "project": PROJECT_SETTINGS,
    "postgres-batched": PROJECT_SETTINGS,
    "postgres-async": PROJECT_SETTINGS,
}
STORAGES = {
    # Dagster's default: a SQLite file per run and an index.
    "sharded": None,
    "sharded-planned-per-run": None,
    # The same files, through the class exact_backfills/instance.py configures (exact_backfills/dagster_private.py).
    "project": ("exact_backfills.dagster_private", "AtomicClaimSqliteEventLogStorage"),
    "consolidated": ("dagster._core.storage.event_log", "ConsolidatedSqliteEventLogStorage"),  # one SQLite file
    "postgres": "postgres",  # the production profile's: DAGSTER_POSTGRES_URL (scripts/postgres.sh start)
    "postgres-direct": "postgres",  # DAGSTER_POSTGRES_DIRECT_URL: the server's own port, no PgBouncer
    "postgres-batched": ("exact_backfills.dagster_private", "AtomicClaimPostgresEventLogStorage"),
    "postgres-async": ("exact_backfills.dagster_private", "AtomicClaimPostgresEventLogStorage"),
}


def definitions(days: int, checks: int) -> tuple[Definitions, list[str]]:
    start = date(1992, 1, 1)
    partitions = DailyPartitionsDefinition(
        start_date=start.isoformat(), end_date=(start + timedelta(days=days)).isoformat()
    )
    assets = []
    for i in range(6):
        name = f"table_{i}"

        @multi_asset(
            name=name,
            specs=[AssetSpec(name, deps=[f"table_{i - 1}"] if i else [])],
            check_specs=[AssetCheckSpec(f"check_{j}", asset=name, partitions_def=partitions) for j in range(checks)],
            partitions_def=partitions,
            backfill_policy=BackfillPolicy.single_run(),
            can_subset=True,
        )
        def table(context):
            key = context.assets_def.key
            for day in context.partition_keys:
                for j in range(checks):
                    context.log_event(
                        AssetCheckEvaluation(
                            asset_key=key, check_name=f"check_{j}", passed=True, partition=day, metadata={"rows": 1}
                        )
                    )
            yield MaterializeResult(asset_key=key, metadata={"rows": 1})

        assets.append(table)
    return Definitions(
        assets=assets, jobs=[define_asset_job("all")], executor=in_process_executor
    ), partitions.get_partition_keys()


def _fresh_database(url: str, synchronous_commit: bool = True) -> str:
    """A new database on the server of `url` (through scripts/postgres.sh), so every measurement starts empty."""
    import subprocess

    name = f"bench_event_log_{int(time.time() * 1000)}"
    statements = [f"CREATE DATABASE {name} OWNER dagster"]
    if not synchronous_commit:
        statements.append(f"ALTER DATABASE {name} SET synchronous_commit = off")
    for statement in statements:
        subprocess.run(
            ["bash", "scripts/postgres.sh", "psql", statement],
            cwd=Path(__file__).resolve().parents[1],
            check=True,
            capture_output=True,
        )
    return url.rsplit("/", 1)[0] + "/" + name


def run(storage: str, days: int, checks: int, create_only: bool = False) -> tuple[float, int]:
    """Seconds to execute (or only create) the run, and how many events it stored."""
    defs, keys = definitions(days, checks)
    with tempfile.TemporaryDirectory() as home:
        overrides: dict = {"telemetry": {"enabled": False}}
        if storage.startswith("postgres"):
            url = os.environ["DAGSTER_POSTGRES_DIRECT_URL" if storage == "postgres-direct" else "DAGSTER_POSTGRES_URL"]
            database = _fresh_database(url, synchronous_commit=storage != "postgres-async")
            if STORAGES[storage] == "postgres":
                overrides["storage"] = {"postgres": {"postgres_url": database}}
            else:  # the project's event log class, Dagster's for the rest (as dagster-postgres.yaml)
                module, cls = STORAGES[storage]
                for part, (part_module, part_cls) in {
                    "run_storage": ("dagster_postgres", "PostgresRunStorage"),
                    "event_log_storage": (module, cls),
                    "schedule_storage": ("dagster_postgres", "PostgresScheduleStorage"),
                }.items():
                    overrides[part] = {"module": part_module, "class": part_cls, "config": {"postgres_url": database}}
        elif STORAGES[storage]:
            module, cls = STORAGES[storage]
            overrides["event_log_storage"] = {"module": module, "class": cls, "config": {"base_dir": home}}
        settings = SETTINGS.get(storage, {})
        saved = {name: os.environ.get(name) for name in settings}
        os.environ.update(settings)
        try:
            with DagsterInstance.local_temp(home, overrides=overrides) as instance:
                tags = {ASSET_PARTITION_RANGE_START_TAG: keys[0], ASSET_PARTITION_RANGE_END_TAG: keys[-1]}
                job = defs.resolve_job_def("all")
                t0 = time.monotonic()
                if create_only:  # what the backfill daemon does before it queues the run: planned events included
                    run_id = instance.create_run_for_job(
                        job_def=job, execution_plan=create_execution_plan(job, tags=tags), tags=tags
                    ).run_id
                else:
                    result = job.execute_in_process(
                        instance=instance,
                        tags=tags,
                        run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
                    )
                    assert result.success
                    run_id = result.run_id
                seconds = time.monotonic() - t0
                return seconds, len(instance.get_records_for_run(run_id, limit=1_000_000).records)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=364)
    parser.add_argument("--checks", type=int, default=4)
    parser.add_argument("--storage", nargs="+", choices=list(STORAGES), default=["sharded"])
    parser.add_argument(
        "--create-run", action="store_true", help="only create the run (planned events), do not execute it"
    )
    parser.add_argument("--out", help="JSON file for the results (bench/event_log.json: docs/performance.md's table)")
    args = parser.parse_args()
    os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
    # Per asset and day, Dagster's default: a planned materialization and a planned row per check; executed, also
    # the materialization and a result per check. A run's own events (start, steps, end) come on top.
    nominal = 6 * args.days * ((1 + args.checks) if args.create_run else (2 + args.checks))
    print(f"{args.days} days x 6 assets x {args.checks} checks: ~{nominal:,} events with Dagster's defaults")
    measured = {}
    for storage in args.storage:
        seconds, events = run(storage, args.days, args.checks, args.create_run)
        label = f"{storage} ({STORAGE_LABELS[storage]})"
        measured[label] = {
            "seconds": round(seconds, 1),
            "events": events,
            "ms_per_event": round(1000 * seconds / events, 2),
        }
        print(f"{storage:<24}{seconds:8.1f} s  {events:6d} events  {1000 * seconds / events:6.2f} ms/event")
    if args.out:
        shape = {"days": args.days, "checks": args.checks, "create_run_only": args.create_run}
        out = Path(args.out)
        earlier = json.loads(out.read_text()) if out.exists() else {}
        # The storages not measured this time keep their figures from a run of the same shape (PostgreSQL's need its
        # server: scripts/postgres.sh).
        kept = {
            label: figures
            for label, figures in earlier.get("storages", {}).items()
            if all(earlier.get(k) == v for k, v in shape.items()) and label.split(" (")[0] not in args.storage
        }
        out.write_text(json.dumps({**shape, "storages": {**measured, **kept}}, indent=2) + "\n")


if __name__ == "__main__":
    main()
