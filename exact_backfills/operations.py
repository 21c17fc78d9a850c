"""What an operator runs around backfills: report (counts and SHA-256 per day, compared), withdrawal of a landed file,
and the minimal metrics, how far each table is behind its landing included (rollback: rollback.py)."""

import json
import os
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import NamedTuple

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from exact_backfills import checks, landing, late_data
from exact_backfills.declare import FILE_COLUMN, Pipeline, Source, SourceKind
from exact_backfills.partitions import days, first_day, last_day
from exact_backfills.publish import Operation, fault_point
from resources import audit, storage
from resources.audit import DayContent
from resources.delta_io import (
    TableNotMaterialized,
    history,
    is_delta_table,
    read_days,
    read_table,
    scalar,
    table_exists,
)
from resources.lake import landing_path, table_path, withdrawn_path


def _range(df: DataFrame, column: str, start: date, end: date) -> DataFrame:
    return df.where(F.col(column).between(F.lit(start), F.lit(end)))


class DayComparison(NamedTuple):
    """A day of a table, and the same day elsewhere (another lake, another Delta version) when compared."""

    day: date
    rows: int
    fingerprint: str | None
    other: DayContent | None = None

    @property
    def matches(self) -> bool | None:
        return None if self.other is None else DayContent(self.rows, self.fingerprint) == self.other


def report(
    spark: SparkSession,
    pipeline: Pipeline,
    table: str,
    start: date,
    end: date,
    against: str | None = None,
    version: int | None = None,
) -> list[DayComparison]:
    """Rows and fingerprint per day; compared with the same table in another lake (dual-run comparison) or at
    another Delta version, when given."""
    column = pipeline.day_column[table]
    mine = checks.day_contents(read_days(spark, table, column, days(start, end)), column)
    other = None
    if against is not None:
        path = table_path(table, against)
        if not is_delta_table(path):
            raise TableNotMaterialized(f"no Delta table {table!r} at {path}")
        other = checks.day_contents(_range(spark.read.format("delta").load(path), column, start, end), column)
    elif version is not None:
        check_version(spark, table, version)
        old = spark.read.format("delta").option("versionAsOf", version).load(table_path(table))
        other = checks.day_contents(_range(old, column, start, end), column)
    none = DayContent(0, None)
    return [
        DayComparison(day, *mine.get(day, none), None if other is None else other.get(day, none))
        for day in days(start, end)
    ]


def check_version(spark: SparkSession, table: str, version: int) -> None:
    """A ValueError naming the table's versions unless `version` is one of them."""
    if not table_exists(table):
        raise TableNotMaterialized(f"Delta table {table!r} does not exist at {table_path(table)}: materialize it first")
    versions = [h.version for h in history(spark, table_path(table))]
    if version not in versions:
        raise ValueError(
            f"version {version} is not in {table}'s history: its versions are {min(versions)}..{max(versions)}"
        )


def landing_lag(spark: SparkSession, pipeline: Pipeline) -> dict:
    """How far the tables are behind their landing, from the landing and the tables alone (not the wall clock): the
    days each table must restate for the batches landed since the watermark, the newest landed and published days,
    and the seconds of landed data not yet published (newest batch load time minus the watermark)."""
    try:
        detection: late_data.Detection | None = late_data.detect(spark, pipeline)
    except late_data.NothingPublished:
        detection = None
    stale = detection.days_by_table() if detection else {}
    behind = any(stale.values())
    watermark = detection.watermark.watermark_ts if detection else None
    lag = None
    if detection and watermark and detection.new_watermark_ts:
        lag = round((detection.new_watermark_ts - watermark).total_seconds(), 1) if behind else 0.0
    landed = max((d for s in pipeline.sources if (d := _newest_landed_day(spark, s))), default=None)
    tables = {}
    for table in pipeline.tables:
        newest = (
            scalar(read_table(spark, table.name).agg(F.max(table.day_column))) if table_exists(table.name) else None
        )
        tables[table.name] = {
            "stale_days": len(stale.get(table.name, [])) if detection else None,
            "newest_published_day": newest.isoformat() if newest else None,
        }
    batches = [landing.batch_name(p) for s in pipeline.sources for p in landing.batch_dirs(s)]
    return {
        "newest_landed_batch": max(batches, default=None),
        "newest_landed_day": landed.isoformat() if landed else None,
        "watermark": watermark.isoformat() if watermark else None,
        "landing_lag_s": lag,
        # Rolled back: not restated until released.
        "held_days": [h.day.isoformat() for h in detection.holds] if detection else [],
        "tables": tables,
    }


def _newest_landed_day(spark: SparkSession, source: Source) -> date | None:
    """The newest day an events source's landed rows are on, within the partitions (a day outside them is
    quarantined)."""
    if source.kind is not SourceKind.EVENTS or not landing.batch_dirs(source):
        return None
    day = F.col(source.day)
    return scalar(landing.read_landing(spark, source).where(day.between(first_day(), last_day())).agg(F.max(day)))


def metrics(spark: SparkSession, pipeline: Pipeline) -> dict:
    """Per asset: p95 run duration (a run's span of work on the asset), the latest run's duplicate keys per 1,000
    rows and reconciliation mismatch count, and how far it is behind its landing (see `landing_lag`)."""
    freshness = landing_lag(spark, pipeline)
    rows = audit.read(spark, pipeline.name).where(F.col("operation") != Operation.ROLLBACK.value)
    per_run = rows.groupBy("asset", "run_id").agg(
        (F.max("ended_at").cast("double") - F.min("started_at").cast("double")).alias("duration_s"),
        F.max("ended_at").alias("ended_at"),
        F.max("duplicate_per_1k").alias("duplicate_per_1k"),
        F.sum("mismatch_count").alias("mismatch_count"),
    )
    assets = []
    for asset_rows in (
        per_run.groupBy("asset")
        .agg(
            F.percentile_approx("duration_s", 0.95).alias("p95_s"),
            F.count(F.lit(1)).alias("runs"),
            F.max_by(F.struct("duplicate_per_1k", "mismatch_count"), "ended_at").alias("latest"),
        )
        .orderBy("asset")
        .collect()
    ):
        assets.append(
            {
                "asset": asset_rows.asset,
                "runs": asset_rows.runs,
                "p95_run_s": round(asset_rows.p95_s, 1),
                "duplicate_per_1k": asset_rows.latest.duplicate_per_1k,
                "mismatch_count": asset_rows.latest.mismatch_count,
                **freshness["tables"].get(asset_rows.asset, {"stale_days": None, "newest_published_day": None}),
            }
        )
    return {**{k: v for k, v in freshness.items() if k != "tables"}, "assets": assets}


@dataclass
class Withdrawal:
    file: str  # as source_file records it, relative to the source's folder
    source: str
    moved_to: str  # a lake path
    days: list[date]  # the days to publish again: every day the file's rows are, or could be, on
    note: str  # the note of why, beside the file moved


# A withdrawal's note goes through these states: written before the file moves (its intent), then once moved, then once
# its days are published again. Each step is resumed by running the same withdrawal again.
WITHDRAWING, WITHDRAWN, PUBLISHED = "withdrawing", "withdrawn", "published"
NOTE_SUFFIX = ".withdrawn.json"


def _landed_file(pipeline: Pipeline, file: str) -> tuple[Source, str]:
    """(source, path relative to its folder) of a landed file given as a path, or relative to the landing
    ("<source>/ingest_date=.."); the file may have been moved out already by an unfinished withdrawal."""
    root = landing_path("")
    given = file if storage.on_object_store(file) or os.path.isabs(file) else storage.join(root, file)
    path = given if storage.on_object_store(given) else os.path.normpath(given)
    sources = pipeline.sources_by_name
    try:
        name, _, rest = storage.relative_to(path, root).partition("/")
    except storage.StorageError:
        raise ValueError(f"{file}: not a file of the landing ({root})") from None
    if name not in sources or not rest:
        raise ValueError(f"{file}: no such landed file under {root}/<{'|'.join(sources)}>/")
    return sources[name], rest


def _read_note(path: str) -> dict:
    return json.loads(storage.read_bytes(path))


def _notes(source: Source, rel: str) -> list[str]:
    """The notes of every withdrawal of that file, oldest first."""
    withdrawn = storage.join(withdrawn_path(source.name), rel)
    name = storage.StoredEntry(withdrawn, False, 0, None).name
    found = [
        e.path
        for e in storage.listing(storage.parent(withdrawn))
        if e.name.startswith(name) and e.name.endswith(NOTE_SUFFIX)
    ]
    notes = [(p, _read_note(p)) for p in found]
    return [p for p, note in sorted(notes, key=lambda n: n[1].get("started_at", "")) if note["file"] == rel]


def _write_note(path: str, note: dict) -> None:
    """Replace the note whole: a crash leaves the old one or the new one, never half of either."""
    storage.write_bytes(path, json.dumps(note, indent=2).encode())


def _free_destination(source: Source, rel: str) -> str:
    """Where a withdrawn file goes: beside any earlier withdrawn file of the same name, never over it."""
    to = storage.join(withdrawn_path(source.name), rel)
    n = 1
    while storage.exists(to) or storage.exists(to + NOTE_SUFFIX):
        to = storage.join(withdrawn_path(source.name), f"{rel}.{n}")
        n += 1
    return to


def withdraw(spark: SparkSession, pipeline: Pipeline, file: str, reason: str) -> Withdrawal:
    """Take a landed file out of the landing: write a note of why and of the days to publish again, then move the file
    to $LAKE_ROOT/withdrawn/ beside it, so that no published row is left that no landed file explains. For events:
    the days its rows are staged or quarantined on, and the days of every other version of its keys (one of which
    becomes the latest); for a dimension: every day from the first its versions take effect (tables read it as of
    their day).

    Crash-safe and resumable: the note is written first (the intent), the file moved second; run again, an
    unfinished withdrawal of the file goes on from its note, and one whose days were not all published again returns
    them again. A file of the same name withdrawn earlier is never overwritten."""
    if not reason.strip():
        raise ValueError("say why the file is withdrawn (--reason)")
    source, rel = _landed_file(pipeline, file)
    path = storage.join(landing_path(source.name), rel)
    # A note without a status is of a withdrawal made before notes had one: it was done.
    unfinished = [n for n in _notes(source, rel) if _read_note(n).get("status", PUBLISHED) != PUBLISHED]
    if unfinished:
        note_path = unfinished[-1]
        note = _read_note(note_path)
        to = note["moved_to"]
    elif not (found := storage.stat(path)) or found.is_folder:
        raise ValueError(f"{file}: no such landed file under {landing_path(source.name)}")
    else:
        note_path, to = _withdrawal_of(spark, pipeline, source, rel, reason)
        note = _read_note(note_path)
    if note["status"] == WITHDRAWING:
        fault_point("withdraw:after-note")
        if storage.exists(path):  # on object storage a move is a copy then a delete: moved again, it finishes
            storage.move(path, to)
        _write_note(note_path, {**note, "status": WITHDRAWN})
    return Withdrawal(rel, source.name, to, [date.fromisoformat(d) for d in note["days"]], note_path)


def published_again(withdrawal: Withdrawal) -> None:
    """Record that a withdrawal's days are published again: the withdrawal is done."""
    note = _read_note(withdrawal.note)
    _write_note(withdrawal.note, {**note, "status": PUBLISHED, "published_at": datetime.now(UTC).isoformat()})


def _withdrawal_of(spark: SparkSession, pipeline: Pipeline, source: Source, rel: str, reason: str) -> tuple[str, str]:
    """Write the note of a new withdrawal of the landed file `rel` (its days decided now), before anything moves;
    return it and where the file goes."""
    first, last = first_day(), last_day()
    if source.kind is SourceKind.EVENTS:
        affected: set[date] = set()
        staging = pipeline.staging[source.name]
        for table, column in [
            (staging.name, staging.day_column),
            *((s.name, s.day_column) for s in staging.side_tables),
        ]:
            if table_exists(table):
                rows = read_table(spark, table).where(F.col(FILE_COLUMN) == rel).select(column).distinct().collect()
                affected |= {r[0] for r in rows}
        landed = landing.read_landing(spark, source)
        key = list(source.key)
        keys = landed.where(F.col(FILE_COLUMN) == rel).dropna(subset=key)
        versions = landed.join(keys.select(*key).distinct(), key, "left_semi")
        affected |= {r[0] for r in versions.select(source.day).distinct().collect() if r[0]}
    else:
        versions = landing.read_landing(spark, source).where(F.col(FILE_COLUMN) == rel)
        since = scalar(versions.agg(F.min(landing.event_day(source))))
        affected = set(days(max(since, first), last)) if since else set()
    to = _free_destination(source, rel)
    note_path = to + NOTE_SUFFIX
    _write_note(
        note_path,
        {
            "file": rel,
            "source": source.name,
            "reason": reason,
            "started_at": datetime.now(UTC).isoformat(),
            "days": [d.isoformat() for d in sorted(d for d in affected if first <= d <= last)],
            "moved_to": to,
            "status": WITHDRAWING,
        },
    )
    return note_path, to
