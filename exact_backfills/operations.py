"""What an operator runs around backfills: report (counts and SHA-256 per day, compared) and withdrawal of a landed
file (rollback: rollback.py; the metrics: metrics.py)."""

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import date
from typing import NamedTuple

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from exact_backfills import checks, clock, landing
from exact_backfills.declare import FILE_COLUMN, RUN_COLUMN, Pipeline, Source, SourceKind
from exact_backfills.partitions import days
from exact_backfills.publish import fault_point
from resources import storage
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


@dataclass(frozen=True)
class Compared:
    """What a report compares a table's days with: the same table in another lake (a LAKE_ROOT: a dual-run
    comparison), or at another Delta version."""

    lake: str | None = None
    version: int | None = None


def report(
    spark: SparkSession,
    pipeline: Pipeline,
    table: str,
    start: date,
    end: date,
    compared: Compared | None = None,
) -> list[DayComparison]:
    """Rows and fingerprint per day; compared with the same table elsewhere (`compared`), when given."""
    column = pipeline.day_columns[table]
    # A quarantined row names the run that wrote it: not part of what it holds, which two lakes are compared by.
    content = (lambda df: df.drop(RUN_COLUMN)) if table in pipeline.side_table_of else (lambda df: df)
    mine = checks.day_contents(content(read_days(spark, table, column, days(start, end))), column)
    other = None
    if compared is not None and compared.lake is not None:
        path = table_path(table, compared.lake)
        if not is_delta_table(path):
            raise TableNotMaterialized(f"no Delta table {table!r} at {path}")
        other = checks.day_contents(content(_range(spark.read.format("delta").load(path), column, start, end)), column)
    elif compared is not None and compared.version is not None:
        check_version(spark, table, compared.version)
        old = spark.read.format("delta").option("versionAsOf", compared.version).load(table_path(table))
        other = checks.day_contents(content(_range(old, column, start, end)), column)
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


class TornNote(ValueError):
    """A withdrawal note that does not parse (cut short, or not a note at all)."""


@dataclass(frozen=True)
class WithdrawalNote:
    """A withdrawal's note, beside the file withdrawn: which file, why, where it goes, the days to publish again, how
    far the withdrawal went, and the file's size and SHA-256 when it began (what a resumed withdrawal moves)."""

    path: str  # the note's own lake path
    file: str
    source: str
    reason: str
    started_at: str
    days: tuple[date, ...]
    moved_to: str
    status: str
    withdrawn: storage.FileDigest | None  # None in a note written before notes recorded it
    published_at: str | None = None

    @classmethod
    def read(cls, path: str) -> "WithdrawalNote":
        """The note at `path`; a TornNote naming it when it does not parse."""
        try:
            fields = json.loads(storage.read_bytes(path))
            digest = storage.FileDigest(int(fields["size"]), str(fields["sha256"])) if "sha256" in fields else None
            return cls(
                path,
                str(fields["file"]),
                str(fields["source"]),
                str(fields.get("reason", "")),
                str(fields.get("started_at", "")),
                tuple(date.fromisoformat(d) for d in fields["days"]),
                str(fields["moved_to"]),
                # A note without a status is of a withdrawal made before notes had one: it was done.
                str(fields.get("status", PUBLISHED)),
                digest,
                fields.get("published_at"),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            why = f"no {error}" if isinstance(error, KeyError) else str(error).splitlines()[0]
            raise TornNote(f"{path}: a withdrawal note that does not parse ({why})") from None

    def to_json(self) -> bytes:
        digest = {"size": self.withdrawn.size, "sha256": self.withdrawn.sha256} if self.withdrawn else {}
        published = {"published_at": self.published_at} if self.published_at else {}
        fields = {
            "file": self.file,
            "source": self.source,
            "reason": self.reason,
            "started_at": self.started_at,
            "days": [d.isoformat() for d in self.days],
            "moved_to": self.moved_to,
            "status": self.status,
            **digest,
            **published,
        }
        return json.dumps(fields, indent=2).encode()


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


def notes_of(source: Source, rel: str, echo: Callable[[str], None] = print) -> list[WithdrawalNote]:
    """The notes of every withdrawal of the landed file `rel`, oldest first. A note of the folder that does not parse
    is named (`echo`, one line each) and skipped: it holds back no other withdrawal."""
    withdrawn = storage.join(withdrawn_path(source.name), rel)
    notes = []
    for entry in storage.listing(storage.parent(withdrawn)):
        if entry.is_folder or not entry.name.endswith(NOTE_SUFFIX):
            continue
        try:
            notes.append(WithdrawalNote.read(entry.path))
        except TornNote as torn:
            echo(f"skipped {torn}: look at it, and remove it once what it was of is accounted for")
    return sorted((n for n in notes if n.file == rel), key=lambda n: n.started_at)


def _write_note(note: WithdrawalNote) -> None:
    """Replace the note whole: a crash leaves the old one or the new one, never half of either."""
    storage.write_bytes(note.path, note.to_json())


def _free_destination(source: Source, rel: str) -> str:
    """Where a withdrawn file goes: beside any earlier withdrawn file of the same name, never over it."""
    to = storage.join(withdrawn_path(source.name), rel)
    n = 1
    while storage.exists(to) or storage.exists(to + NOTE_SUFFIX):
        to = storage.join(withdrawn_path(source.name), f"{rel}.{n}")
        n += 1
    return to


def withdraw(
    spark: SparkSession, pipeline: Pipeline, file: str, reason: str, echo: Callable[[str], None] = print
) -> Withdrawal:
    """Take a landed file out of the landing: write a note of why, of the days to publish again and of the file's size
    and SHA-256, then move the file to $LAKE_ROOT/withdrawn/ beside it, so that no published row is left that no
    landed file explains. For events: the days its rows are staged or quarantined on, and the days of every other
    version of its keys (one of which becomes the latest); for a dimension: every day from the first its versions
    take effect (tables read it as of their day).

    Crash-safe and resumable: the note is written first (the intent), the file moved second, and only if it is still
    the bytes the note recorded; run again, an unfinished withdrawal of the file goes on from its note, and one whose
    days were not all published again returns them again. Nothing is ever moved over another file."""
    if not reason.strip():
        raise ValueError("say why the file is withdrawn (--reason)")
    source, rel = _landed_file(pipeline, file)
    landed = storage.join(landing_path(source.name), rel)
    unfinished = [n for n in notes_of(source, rel, echo) if n.status != PUBLISHED]
    if unfinished:
        note = unfinished[-1]
    elif not (found := storage.stat(landed)) or found.is_folder:
        raise ValueError(f"{file}: no such landed file under {landing_path(source.name)}")
    else:
        # Its digest before its rows are read for the days: a file replaced after that is refused when moved.
        withdrawn = storage.digest(landed)
        note = begin_withdrawal(source, rel, reason, _days_to_publish(spark, pipeline, source, rel), withdrawn)
    if note.status == WITHDRAWING:
        fault_point("withdraw:after-note")
        note = move_withdrawn(note, landed)
    return Withdrawal(rel, source.name, note.moved_to, list(note.days), note.path)


def published_again(withdrawal: Withdrawal) -> None:
    """Record that a withdrawal's days are published again: the withdrawal is done."""
    note = WithdrawalNote.read(withdrawal.note)
    _write_note(replace(note, status=PUBLISHED, published_at=clock.now().isoformat()))


def begin_withdrawal(
    source: Source, rel: str, reason: str, days_to_publish: list[date], withdrawn: storage.FileDigest
) -> WithdrawalNote:
    """Write the note of a new withdrawal of the landed file `rel`, whose bytes are `withdrawn`, before anything
    moves. A note is only ever created where none is: two withdrawals of one file begun at once do not both go on."""
    to = _free_destination(source, rel)
    now = clock.now().isoformat()
    note = WithdrawalNote(
        to + NOTE_SUFFIX, rel, source.name, reason, now, tuple(days_to_publish), to, WITHDRAWING, withdrawn
    )
    try:
        storage.create_bytes(note.path, note.to_json())
    except FileExistsError:
        raise ValueError(
            f"{note.path}: another withdrawal of {source.name}/{rel} began at the same time; run the same withdraw "
            "again to go on with it"
        ) from None
    return note


def _digest_at(path: str) -> storage.FileDigest | None:
    found = storage.stat(path)
    if found is not None and found.is_folder:
        raise ValueError(f"{path} is a folder, not the file withdrawn: nothing moved")
    return None if found is None else storage.digest(path)


def move_withdrawn(note: WithdrawalNote, landed: str) -> WithdrawalNote:
    """Move the file the note is of from `landed` to where the note says, only if it is the bytes the note recorded
    (size and SHA-256), never over another file; a move cut short (those bytes at both places) is finished. Anything
    else is refused in one line naming the file and what differs, with nothing moved."""
    recorded = note.withdrawn
    if recorded is None:
        raise ValueError(
            f"{note.path} records no size or SHA-256 of {landed} (written before notes did): it cannot be told to be "
            "the file whose withdrawal began; nothing moved (if it is, remove the note and withdraw the file again)"
        )
    there, here = _digest_at(note.moved_to), _digest_at(landed)
    if there is not None and there != recorded:
        raise ValueError(
            f"{note.moved_to} already holds other bytes ({there.describe()}) than the file withdrawn "
            f"({recorded.describe()}, note {note.path}): not replaced, nothing moved"
        )
    if there is None:
        if here is None:
            raise ValueError(f"{landed}: the file withdrawn is neither there nor at {note.moved_to}: nothing moved")
        if here != recorded:
            raise ValueError(
                f"{landed} is not the file whose withdrawal began: it holds {here.describe()}, its note {note.path} "
                f"recorded {recorded.describe()}; nothing moved"
            )
        try:
            storage.move(landed, note.moved_to)
        except FileExistsError:
            raise ValueError(f"{note.moved_to} appeared while {landed} was moved there: not replaced") from None
    elif here == recorded:
        storage.delete_file(landed)  # moved, but cut short before the landed copy went
    moved = replace(note, status=WITHDRAWN)
    _write_note(moved)
    return moved


def _days_to_publish(spark: SparkSession, pipeline: Pipeline, source: Source, rel: str) -> list[date]:
    """The days, within the partitions, that a withdrawal of the landed file `rel` publishes again, decided before
    anything moves (see `withdraw`)."""
    partitions = pipeline.partitions
    first, last = partitions.first_day, partitions.last_day
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
        since = scalar(versions.agg(F.min(landing.event_day(source, partitions))))
        affected = set(days(max(since, first), last)) if since else set()
    return sorted(d for d in affected if first <= d <= last)
