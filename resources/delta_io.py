"""Delta table I/O. `overwrite_days` is the one write primitive every asset uses.

Every Delta operation goes through Spark SQL and the DataFrame API (`DESCRIBE DETAIL`, `DESCRIBE HISTORY`, `MERGE`,
`UPDATE`, `versionAsOf`), never `delta.tables`: the same code runs on a classic session and over Spark Connect, where
Delta's Python table API needs a server plugin. Whether a table exists is read from its log's folder, through the
lake's storage (resources/storage.py), without asking Spark."""

import json
import os
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any
from urllib.parse import unquote

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from resources import storage
from resources.lake import table_path


class TableNotMaterialized(RuntimeError):
    pass


class TableOfAnotherPipeline(RuntimeError):
    """A write to a table another pipeline writes: two pipelines sharing a lake never touch each other's tables."""


class CommitOutcomeUnknown(RuntimeError):
    """A commit call failed and the table's log could not be read to learn whether the commit was made."""


class ShapeChangeRefused(RuntimeError):
    """A write whose columns (or key) differ from its table's that would not replace every day the table holds: its
    old days would read the new shape with nulls, keep a dropped column's values, or hold rows unique on another key."""


@dataclass(frozen=True)
class SchemaDiff:
    """How a table's columns change: added and dropped columns with their types, retyped ones (before, after).
    Nullability is left out: Delta reads a column written non-null into a nullable one as it is."""

    added: dict[str, str] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    retyped: dict[str, tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def between(cls, before: T.StructType, after: T.StructType) -> "SchemaDiff":
        was = {f.name: f.dataType.simpleString() for f in before.fields}
        now = {f.name: f.dataType.simpleString() for f in after.fields}
        return cls(
            {c: t for c, t in now.items() if c not in was},
            {c: t for c, t in was.items() if c not in now},
            {c: (was[c], t) for c, t in now.items() if c in was and was[c] != t},
        )

    def __bool__(self) -> bool:
        return bool(self.added or self.dropped or self.retyped)

    def describe(self) -> str:
        said = [f"added {c} ({t})" for c, t in self.added.items()]
        said += [f"dropped {c} ({t})" for c, t in self.dropped.items()]
        said += [f"retyped {c} ({b} → {a})" for c, (b, a) in self.retyped.items()]
        return ", ".join(said) or "none"

    def to_json(self) -> dict[str, Any]:
        return {"added": self.added, "dropped": self.dropped, "retyped": {c: list(t) for c, t in self.retyped.items()}}

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None) -> "SchemaDiff":
        doc = doc or {}
        return cls(
            doc.get("added", {}), doc.get("dropped", {}), {c: (b, a) for c, (b, a) in doc.get("retyped", {}).items()}
        )


@dataclass(frozen=True)
class KeyChange:
    """How a table's natural key changes: the columns its rows were unique on, and those they are unique on now."""

    before: tuple[str, ...]
    after: tuple[str, ...]

    @classmethod
    def between(cls, before: Sequence[str] | None, after: Sequence[str] | None) -> "KeyChange | None":
        """None when either is unknown (a commit from before keys were recorded) or both are the same columns."""
        if not before or not after or set(before) == set(after):
            return None
        return cls(tuple(before), tuple(after))

    def describe(self) -> str:
        return f"key changes ({', '.join(self.before)} → {', '.join(self.after)})"

    def to_json(self) -> dict[str, Any]:
        return {"before": list(self.before), "after": list(self.after)}

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None) -> "KeyChange | None":
        return cls(tuple(doc["before"]), tuple(doc["after"])) if doc else None


@dataclass(frozen=True)
class Commit:
    table: str
    version: int | None  # None: nothing to replace and nothing to write, so Delta recorded no commit
    rows_written: int
    files_added: int
    files_removed: int
    by_day: dict[str, dict[str, int]] = field(default_factory=dict)  # day -> rows_written, files_added, files_removed
    # The failure its call reported though the commit was made (found in the log by its id): an answer lost.
    call_failed: str | None = None
    columns: tuple[tuple[str, str], ...] = ()  # the rows' columns written, with their types


@dataclass(frozen=True)
class Scan:
    """What one read scans: the files it reads, against every file of the source. A read of a few days of a table
    partitioned by day reads only those days' files (its plan's, `DataFrame.inputFiles`, once the days are pruned);
    a read of the landing, the files listed for it (landing.landing_read)."""

    source: str
    files: int
    files_total: int
    bytes: int
    bytes_total: int
    batches: int | None = None  # the landing's: batch folders read, of `batches_total`
    batches_total: int | None = None

    def metadata(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "source" and v is not None}


def scalar(df: DataFrame) -> Any:
    """The one value of a one-row aggregate, such as `df.agg(F.max(c))`."""
    row = df.first()
    if row is None:
        raise ValueError("an aggregate without groups returned no row")
    return row[0]


def scan_of_table(df: DataFrame, table: str) -> Scan:
    """The scan of `df`, a read of `table` (read_days), against the table's current files."""
    files = df.inputFiles()
    detail = df.sparkSession.sql(f"DESCRIBE DETAIL {delta_path(table_path(table))}")
    num_files, size = detail.select("numFiles", "sizeInBytes").first() or (0, 0)
    read = [storage.normalized(unquote(f)) for f in files]
    return Scan(table, len(files), num_files, storage.total_size(read, table_path(table)), size)


def day_runs(days: Sequence[date]) -> list[tuple[date, date]]:
    """Sorted days as runs of consecutive days: a backfill's range is one run, a restatement's days a few."""
    runs: list[list[date]] = []
    for day in sorted(set(days)):
        if runs and day == runs[-1][1] + timedelta(days=1):
            runs[-1][1] = day
        else:
            runs.append([day, day])
    return [(a, b) for a, b in runs]


def day_predicate(column: str, days: Sequence[date]) -> str:
    """SQL selecting exactly `days` (at least one), short whatever their number: one range per run of days."""
    if not days:
        raise ValueError("no days given")
    return " OR ".join(f"({column} >= '{a.isoformat()}' AND {column} <= '{b.isoformat()}')" for a, b in day_runs(days))


def day_filter(column: str, days: Sequence[date]) -> Column:
    return F.expr(day_predicate(column, days))


def delta_path(path: str) -> str:
    """A Delta table by its path, in SQL."""
    return "delta.`" + path.replace("`", "``") + "`"


def table_properties(spark: SparkSession, path: str) -> dict[str, str]:
    """The table properties of the Delta table at `path`."""
    detail = spark.sql(f"DESCRIBE DETAIL {delta_path(path)}").select("properties").collect()
    return dict(detail[0]["properties"] or {})


# A file of a Delta table's log that only a commit writes: a version's entry or a checkpoint of the versions before.
_COMMITTED = re.compile(r"^\d{20}\.(json|checkpoint\b)")


def is_delta_table(path: str) -> bool:
    """Whether `path` holds a Delta table: its log has a commit. Looked up on the file system this process sees the
    lake on, without asking Spark, which would load the table's snapshot to answer."""
    return any(_COMMITTED.match(entry.name) for entry in storage.listing(storage.join(path, "_delta_log")))


# A version's entry in a Delta table's log.
_ENTRY = re.compile(r"^(\d{20})\.json$")


def latest_version(path: str) -> int:
    """The newest version in the log of the Delta table at `path` (-1: none), from its folder."""
    newest = newest_log_entry(path)
    return -1 if newest is None else log_version(newest)


def newest_log_entry(path: str) -> storage.StoredEntry | None:
    """The log file of the newest version of the Delta table at `path` (None: no table), from its folder: its size and
    time tell a table made again at the same path from the one before."""
    log = [entry for entry in storage.listing(storage.join(path, "_delta_log")) if _ENTRY.match(entry.name)]
    return max(log, key=log_version, default=None)


def log_version(entry: storage.StoredEntry) -> int:
    """The version a log file of a Delta table commits."""
    found = _ENTRY.match(entry.name)
    assert found, entry.path
    return int(found.group(1))


def table_exists(table: str) -> bool:
    return is_delta_table(table_path(table))


def history(spark: SparkSession, path: str, limit: int | None = None) -> list:
    """The table's commits, newest first: version, userMetadata and the rest of DESCRIBE HISTORY."""
    return spark.sql(f"DESCRIBE HISTORY {delta_path(path)}" + (f" LIMIT {int(limit)}" if limit else "")).collect()


def read_table(spark: SparkSession, table: str) -> DataFrame:
    if not table_exists(table):
        raise TableNotMaterialized(
            f"Delta table {table!r} does not exist at {table_path(table)}: materialize it (or its upstream) first"
        )
    return spark.read.format("delta").load(table_path(table))


def read_days(spark: SparkSession, table: str, column: str, days: Sequence[date]) -> DataFrame:
    return read_table(spark, table).where(day_filter(column, days))


def read_path(
    spark: SparkSession, path: str, column: str, days: Sequence[date], version: int | None = None
) -> DataFrame:
    """`days` of the Delta table at `path` (as of `version` when given)."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(path).where(day_filter(column, days))


def current_version(spark: SparkSession, table: str) -> int | None:
    """The table's latest Delta version (None: not materialized)."""
    if not table_exists(table):
        return None
    return int(history(spark, table_path(table), 1)[0].version)


def write_new_table(df: DataFrame, path: str, column: str) -> None:
    """Write `df` as the whole of a new Delta table at `path`, partitioned by day like the lake's (a plan's shadow
    table: nothing reads it while it is written)."""
    df.repartition(column).write.format("delta").mode("overwrite").partitionBy(column).save(path)


# For the fault-injection tests: EXACT_BACKFILLS_FAIL_AFTER_COMMIT=<table> makes the commit call of that table fail
# once Delta has made the commit, as an answer lost on its way back does (the engine's connection broken, retries
# exhausted, an I/O error reading the entry back): the commit is in the log, its caller is told it failed.
FAIL_AFTER_COMMIT = "EXACT_BACKFILLS_FAIL_AFTER_COMMIT"


class InjectedFailure(IOError):
    """The failure FAIL_AFTER_COMMIT injects."""


def _fault_after_commit(table: str) -> None:
    if os.environ.get(FAIL_AFTER_COMMIT) == table:
        raise InjectedFailure(f"{FAIL_AFTER_COMMIT}={table}: the commit call failed after the commit was made")


# In every commit's userMetadata: an id of its own, by which the log tells whether the commit was made whatever its
# call said (two commits of the same change, a retried run's, carry the same other fields).
COMMIT_ID = "commit_id"
# The natural key the rows of a table's commit are unique on: a commit of another key must replace every day.
KEY = "key"


def made_commit(path: str, before: int, metadata: str) -> dict | None:
    """The entry (`_commit_entry`) of the commit whose userMetadata is `metadata`, among the versions of the table at
    `path` after `before`; None when none of them is it. Newest first: other commits may have followed it (tables are
    committed at once from several threads, and other writers may commit too)."""
    return next(
        (
            e
            for v in range(latest_version(path), before, -1)
            if (e := _commit_entry(path, v)).get("userMetadata") == metadata
        ),
        None,
    )


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def _made_despite(failed: Exception, table: str, path: str, before: int, metadata: str) -> dict:
    """A commit whose call failed: its entry when the log holds it (it was made, and only its answer was lost: a
    connection broken after the commit, an object store's answer lost then the entry unreadable); otherwise the
    failure, raised again. CommitOutcomeUnknown when the log cannot be read to tell."""
    try:
        entry = made_commit(path, before, metadata)
    except Exception as unreadable:  # noqa: BLE001  whatever keeps the log from being read, the outcome is unknown
        commit_id = json.loads(metadata)[COMMIT_ID]
        raise CommitOutcomeUnknown(
            f"{table}: the commit call failed ({_first_line(failed)}) and its log could not be read to learn whether "
            f"the commit was made ({_first_line(unreadable)}): DESCRIBE HISTORY shows it if a commit's userMetadata "
            f"names {COMMIT_ID} {commit_id}"
        ) from failed
    if entry is None:
        raise failed
    return entry


def refuse_partial_reshape(
    spark: SparkSession,
    table: str,
    column: str,
    days: Sequence[date],
    schema: T.StructType,
    key: Sequence[str] | None,
    written_by: dict[str, Any] | None = None,
) -> SchemaDiff | None:
    """ShapeChangeRefused unless a write over `days` of rows shaped `schema`, unique on `key`, keeps the table's shape
    (its columns, the key its last write named) or replaces every day it holds; how its columns change (None: they do
    not, or there is no table). Asked before anything of a change is committed, and again by each commit."""
    path = table_path(table)
    before = latest_version(path)
    if before < 0:
        return None
    key_was = (written_note(path, before) if written_by is None else written_by).get(KEY)
    shape = SchemaDiff.between(spark.read.format("delta").load(path).schema, schema)
    changes = [f"columns change ({shape.describe()})"] if shape else []
    if key_change := KeyChange.between(key_was, key):  # rows unique on one key, or the other: never a mix
        changes.append(key_change.describe())
    if changes:
        _refuse_partial_rewrite(spark, path, table, column, days, "; ".join(changes))
    return shape or None


def _refuse_partial_rewrite(
    spark: SparkSession, path: str, table: str, column: str, days: Sequence[date], change: str
) -> None:
    """ShapeChangeRefused unless `days` holds every day the table holds: `change` (its columns', its key's) replaces
    them all in one commit."""
    held = sorted(r[0] for r in spark.read.format("delta").load(path).select(column).distinct().collect())
    left = [d for d in held if d not in set(days)]
    if left:
        raise ShapeChangeRefused(
            f"{table}'s {change}: a change of shape replaces every day of the table in one commit, and this write "
            f"replaces {len(set(days) & set(held))} of its {len(held)} day(s); plan and promote the change over every "
            f"day it holds ({held[0]}..{held[-1]})"
        )


def overwrite_days(df: DataFrame, table: str, column: str, days: Sequence[date], commit_info: dict) -> Commit:
    """Atomically replace exactly `days` of `table` with `df`, in one Delta commit: a backfill's range, or the
    scattered days a restatement touches.

    `replaceWhere` removes exactly the partitions of those days (days that `df` has no rows for end up empty, so a
    key moved to another day leaves no trace) and Delta rejects the commit if `df` holds a row of any other day: a
    write can never delete or add anything outside its days. Partitioning by the day keeps each day in files of its
    own, so files of other days are never rewritten.

    A write whose columns differ from the table's (a column added, dropped or retyped) changes its shape: it must
    replace every day the table holds, and replaces the whole table and its schema in one commit
    (ShapeChangeRefused, nothing written, otherwise). So must a write whose `commit_info` names a key (`KEY`) other
    than the table's last write named.
    """
    path = table_path(table)
    commit_info = {**commit_info, COMMIT_ID: commit_info.get(COMMIT_ID) or uuid.uuid4().hex}
    metadata = json.dumps(commit_info, sort_keys=True, default=str)
    before = latest_version(path)
    written_by = written_note(path, before)
    owner = written_by.get("pipeline")
    if owner and commit_info.get("pipeline") and owner != commit_info["pipeline"]:
        raise TableOfAnotherPipeline(
            f"{table} is written by pipeline {owner!r}, not {commit_info['pipeline']!r}: two pipelines sharing a "
            "lake must name their tables apart"
        )
    writer = (
        df.repartition(column)  # one file per day instead of one per day per task (rows held by day: no exchange)
        .write.format("delta")
        .mode("overwrite")
        .option("userMetadata", metadata)
        .partitionBy(column)
    )
    written = df.schema  # read once: over Spark Connect each read is a round trip
    key = commit_info.get(KEY)
    if refuse_partial_reshape(df.sparkSession, table, column, days, written, key, written_by):
        writer = writer.option("overwriteSchema", "true")  # the whole table in the new shape, in one commit
    else:
        writer = writer.option("replaceWhere", day_predicate(column, days))
    entry: dict | None
    call_failed = None
    try:
        writer.save(path)
        _fault_after_commit(table)
    except Exception as failed:
        entry, call_failed = _made_despite(failed, table, path, before, metadata), _first_line(failed)
    else:
        # Our commit is the new version that carries our metadata. None: Delta records no commit with no actions (an
        # empty range written empty).
        entry = made_commit(path, before, metadata)
    if entry is None:
        return Commit(table=table, version=None, rows_written=0, files_added=0, files_removed=0)
    metrics = entry.get("operationMetrics") or {}
    return Commit(
        table=table,
        version=entry["version"],
        rows_written=int(metrics.get("numOutputRows", 0)),
        files_added=int(metrics.get("numFiles", 0)),
        files_removed=int(metrics.get("numRemovedFiles", 0)),
        by_day=entry["by_day"],
        call_failed=call_failed,
        columns=tuple((f.name, f.dataType.simpleString()) for f in written.fields),
    )


def owner_of(path: str, version: int | None = None) -> str | None:
    """The pipeline that wrote the table at `path` (as of `version`, default the latest), from its userMetadata."""
    owner = written_note(path, latest_version(path) if version is None else version).get("pipeline")
    return str(owner) if owner else None


def written_note(path: str, version: int) -> dict[str, Any]:
    """The userMetadata of the newest commit up to `version` that overwrite_days made ({} when none is in the log):
    others (a vacuum's, a change of the table's properties) carry none, so the one before them is read."""
    for v in range(version, -1, -1):
        try:
            note = json.loads(_commit_entry(path, v).get("userMetadata") or "{}")
        except FileNotFoundError:  # the log's older entries cleaned up, past its retention
            return {}
        if COMMIT_ID in note:
            return note
    return {}


def _commit_entry(path: str, version: int) -> dict:
    """Commit `version` of the table at `path`: its commitInfo action with its version, and per day partition the
    rows and files it added and the files it removed (from its add and remove actions). Read from the log's file on
    the file system this process sees the lake on: a Spark job would cost a commit more than the file's few lines."""
    entry: dict = {"version": version, "by_day": {}}
    lines = storage.read_bytes(storage.join(path, "_delta_log", f"{version:020d}.json")).decode().splitlines()
    for line in lines:
        action = json.loads(line)
        if "commitInfo" in action:
            entry.update({**action["commitInfo"], "version": version})
        for kind in ("add", "remove"):
            if kind in action:
                day = next(iter((action[kind].get("partitionValues") or {None: None}).values()))  # one day column
                counts = entry["by_day"].setdefault(day, {"rows_written": 0, "files_added": 0, "files_removed": 0})
                if kind == "add":
                    counts["files_added"] += 1
                    counts["rows_written"] += json.loads(action["add"].get("stats") or "{}").get("numRecords", 0)
                else:
                    counts["files_removed"] += 1
    return entry
