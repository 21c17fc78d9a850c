"""A lake's content, by column name, for exact comparisons: rows, data files by day, Delta versions, duplicate keys,
and what a from-scratch build of the same landing makes."""

import os
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

from exact_backfills.declare import Pipeline
from resources.delta_io import history, read_table
from resources.lake import control_path, table_path
from tests.support.orders import ORDERS, TABLES

TABLE_KEYS = {t.name: list(t.key) for t in TABLES}


@contextmanager
def environment(**values: str):
    """The process's environment with `values` set, restored afterwards (settings are read on every call)."""
    previous = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def rows(spark, table):
    """Every row of a table, by column name, sorted: the table's whole content, for exact comparisons (without the
    run that wrote a row, which quarantine records)."""
    found = [r.asDict() for r in read_table(spark, table).drop("run_id").collect()]
    return sorted(found, key=lambda row: repr(sorted(row.items())))


def day_sha256(spark, pipeline: Pipeline = ORDERS) -> dict[str, dict]:
    """The SHA-256 fingerprint (the checks' own) of every day of every table of the pipeline, without the run that
    wrote a row, and with the landed file a row came from named by its batch folder (a file's own name is made by the
    writer that landed it): two lakes with equal fingerprints hold the same rows from the same batches."""
    from pyspark.sql import functions as F

    from exact_backfills.checks import day_fingerprints
    from exact_backfills.declare import FILE_COLUMN

    def comparable(table):
        rows = read_table(spark, table).drop("run_id")
        if FILE_COLUMN in rows.columns:
            rows = rows.withColumn(FILE_COLUMN, F.regexp_extract(FILE_COLUMN, "^(.*)/[^/]*$", 1))
        return rows

    return {
        t: {r.day: r.fingerprint for r in day_fingerprints(comparable(t), pipeline.day_columns[t]).collect()}
        for t in pipeline.every_table
    }


def files_by_day(spark, table, day_column):
    """The table's live data files, grouped by the day partition folder they sit in."""
    by_day = defaultdict(set)
    for f in read_table(spark, table).inputFiles():
        part = next(p for p in Path(f).parts if p.startswith(f"{day_column}="))
        by_day[part.split("=", 1)[1]].add(f)
    return dict(by_day)


def versions(spark, table):
    return [r.version for r in history(spark, table_path(table))]


def control_versions(spark, table, pipeline: Pipeline = ORDERS):
    """The versions of one of a pipeline's control tables (its watermark, exceptions, ...)."""
    return [r.version for r in history(spark, control_path(pipeline.name, table))]


def duplicate_keys(spark, table, pipeline: Pipeline = ORDERS):
    keys = list(pipeline.by_name[table].key)
    return read_table(spark, table).groupBy(*keys).count().where("count > 1").count()


def from_scratch(spark, tmp_path, start, end, view=None, pipeline: Pipeline = ORDERS, leave_out: tuple[str, ...] = ()):
    """Every table's rows as a from-scratch backfill of start..end over a copy of this lake's landing builds them, in
    a lake and a Dagster instance of its own (or `view(spark)` of that lake). `leave_out`: batches left out of the
    copy, as `<source>/ingest_date=D`."""
    from dagster import DagsterInstance

    from exact_backfills.backfill import BackfillRequest, run_backfill

    scratch = tmp_path / "scratch"
    copy_landing(scratch, leave_out)
    said: list[str] = []
    with environment(LAKE_ROOT=str(scratch)), DagsterInstance.ephemeral() as instance:
        assert run_backfill(
            BackfillRequest(pipeline, start, end, chunk_size=366), instance=instance, echo=said.append
        ), "\n".join(said)
        return view(spark) if view else {t: rows(spark, t) for t in pipeline.every_table}


def copy_landing(to: Path, leave_out: tuple[str, ...] = ()) -> None:
    """This lake's landing, on a local folder or on object storage, copied into the local lake `to`, file by file
    (but for the batches `leave_out` names, as `<source>/ingest_date=D`)."""
    from resources import storage
    from resources.lake import landing_path

    root = landing_path("")
    for file in storage.files_below(root):
        relative = storage.relative_to(file.path, root)
        if any(relative.startswith(f"{batch}/") for batch in leave_out):
            continue
        target = to / "landing" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(storage.read_bytes(file.path))


@contextmanager
def own_engine_session(home: Path):
    """A session on a warm engine of its own in `home`, started with this process's environment: for a module whose
    lake the test session's engine does not reach (object storage). The engine stops afterwards."""
    import subprocess
    import sys

    from pyspark.sql import SparkSession

    from resources import engine
    from resources.settings import settings
    from resources.spark import engine_settings

    with environment(SPARK_ENGINE_HOME=str(home)):
        warm = engine.ensure(home, engine_settings(settings()))
        session = SparkSession.builder.remote(engine.client_url(home, warm)).create()
        try:
            yield session
        finally:
            session.stop()
            subprocess.run([sys.executable, "-m", "exact_backfills", "engine", "stop"], capture_output=True)
