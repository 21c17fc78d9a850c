"""The landing contract: immutable, append-only Parquet batches under $LAKE_ROOT/landing/<source>/ingest_date=D/, each
file with the source's schema (a file that breaks it is refused by name, never read)."""

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from exact_backfills.calendar import Partitions
from exact_backfills.declare import BATCH_COLUMN, FILE_COLUMN, Pipeline, Source, SourceKind
from exact_backfills.partitions import bytes_by_day, days_per_run
from resources import storage
from resources.delta_io import Scan
from resources.lake import landing_path
from resources.settings import settings
from resources.storage import StoredEntry


class LandingError(RuntimeError):
    pass


BATCH_PREFIX = f"{BATCH_COLUMN}="
REFUSED_FILE = "refused_file"  # the quarantine reason of a file the contract refuses
REFUSED = "refused"  # on a row read from the landing: why its file was refused (null: a row of an accepted file)


def _batch_day(name: str) -> date | None:
    if not name.startswith(BATCH_PREFIX):
        return None
    try:
        return date.fromisoformat(name[len(BATCH_PREFIX) :])
    except ValueError:
        return None


def batch_dirs(source: Source) -> list[StoredEntry]:
    """The batch folders: `ingest_date=YYYY-MM-DD`. Anything else under the source's folder is not read, and
    `refused_files` reports it."""
    return [e for e in storage.listing(landing_path(source.name)) if e.is_folder and _batch_day(e.name)]


def batch_name(batch_dir: StoredEntry) -> str:
    return batch_dir.name.split("=", 1)[1]


def batch_bytes(source: Source) -> dict[str, int]:
    """The landed bytes of each batch of the source, from one listing of its folder (which pages on object storage)."""
    root = landing_path(source.name)
    found: dict[str, int] = defaultdict(int)
    for file in storage.files_below(root):
        folder = storage.relative_to(file.path, root).split("/", 1)[0]
        if _batch_day(folder) and not file.name.startswith((".", "_")):
            found[folder[len(BATCH_PREFIX) :]] += file.size
    return dict(found)


def days_per_backfill_run(pipeline: Pipeline) -> int:
    """How many days one run of a backfill covers: as many as the landing's batches hold within
    BACKFILL_MAX_BYTES_PER_RUN, at most BACKFILL_MAX_PARTITIONS_PER_RUN (partitions.bytes_by_day, days_per_run)."""
    by_batch: dict[date, int] = defaultdict(int)
    for source in pipeline.sources:
        for batch, size in batch_bytes(source).items():
            by_batch[date.fromisoformat(batch)] += size
    configured = settings()
    return days_per_run(
        bytes_by_day(by_batch, pipeline.partitions.first_day),
        configured.backfill_max_bytes_per_run,
        configured.backfill_max_partitions_per_run,
    )


@dataclass(frozen=True)
class Refusal:
    """A landed file the contract refuses: never read, reported with the reason (`check`, the landing_contract
    check), and, for events, kept in quarantine as one row naming the file."""

    source: str
    file: str  # relative to the source's folder, as source_file records it
    batch: str | None  # None: not in a batch folder
    reason: str

    def describe(self) -> str:
        """The file as `withdraw --file` takes it, and why it is refused."""
        return f"{self.source}/{self.file}: {self.reason}"


@dataclass(frozen=True)
class Conversion:
    """A column a file stores otherwise than as the contract's type: read as `stored`, then converted to it."""

    column: str
    stored: T.DataType
    nanos: bool = False  # INT64 nanoseconds (pyarrow's default), to a timestamp; else a widening cast

    def converted(self, to: T.DataType) -> Column:
        if self.nanos:
            return F.expr(f"timestamp_micros(div({self.column}, 1000))")
        return F.col(self.column).cast(to)


@dataclass
class LandedFiles:
    """A source's landed files, as the contract sorts them."""

    plain: list[str] = field(default_factory=list)  # read as they are
    converted: dict[tuple[Conversion, ...], list[str]] = field(default_factory=dict)  # columns read otherwise -> files
    refused: list[Refusal] = field(default_factory=list)


def _arrow_mismatch(expected: T.DataType, column: Any, arrow_type: Any) -> str | None:
    """Why a file's column cannot be read as the contract's type (None: it can; "nanos": as INT64 nanoseconds)."""
    import pyarrow as pa

    if isinstance(expected, T.TimestampType):
        if column.physical_type == "INT96":
            return None
        if pa.types.is_timestamp(arrow_type):
            return "nanos" if arrow_type.unit == "ns" else None
    ok = {
        T.LongType: lambda t: pa.types.is_int64(t),
        T.IntegerType: lambda t: pa.types.is_int32(t),
        T.ShortType: lambda t: pa.types.is_int16(t),
        T.ByteType: lambda t: pa.types.is_int8(t),
        T.BooleanType: lambda t: pa.types.is_boolean(t),
        T.DoubleType: lambda t: pa.types.is_float64(t),
        T.FloatType: lambda t: pa.types.is_float32(t),
        T.BinaryType: lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t),
        T.DateType: lambda t: pa.types.is_date32(t),
        T.StringType: lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
        T.DecimalType: lambda t: (
            pa.types.is_decimal(t)
            and isinstance(expected, T.DecimalType)
            and (t.precision, t.scale) == (expected.precision, expected.scale)
        ),
    }.get(type(expected), lambda t: False)  # type: ignore[arg-type]
    if ok(arrow_type):
        return None
    return f"column {column.name} is {arrow_type}, the contract says {expected.simpleString()}"


# (path, size, mtime) -> verdict; files are immutable
_verdicts: dict[tuple[str, int, int, str], tuple[str, tuple[Conversion, ...]]] = {}


def _file_verdict(file: StoredEntry, source: Source, batch: date | None) -> tuple[str, tuple[Conversion, ...]]:
    """("", the columns to convert) for a file of `batch` the contract accepts, (reason, ()) for one it refuses."""
    cache_key = (
        file.path,
        file.size,
        file.modified_ns or 0,
        f"{source.schema.json()}{source.columns_added}{source.columns_dropped}{source.columns_retyped}",
    )
    if cache_key in _verdicts:
        return _verdicts[cache_key]
    if file.size == 0:
        verdict = ("zero-byte file", ())
    else:
        try:
            footer = storage.parquet_footer(file.path)
            arrow = footer.schema.to_arrow_schema()
        except Exception as e:  # pyarrow raises several kinds for a file that is not Parquet
            verdict = (f"not a readable Parquet file ({str(e).splitlines()[0][:200]})", ())
        else:
            contract = source.schema
            columns = {footer.schema.column(i).path: footer.schema.column(i) for i in range(len(footer.schema))}
            missing = [f.name for f in contract.fields if f.name not in columns and not source.may_lack(f.name, batch)]
            extra = [n for n in columns if n not in contract.fieldNames() and not source.may_carry(n, batch)]
            problems = [f"missing column {c}" for c in missing] + [f"unexpected column {c}" for c in extra]
            converted = []
            for f in contract.fields:
                if f.name in columns:
                    stored = arrow.field(f.name).type
                    why = _arrow_mismatch(f.dataType, columns[f.name], stored)
                    was = source.former_type(f.name, batch)
                    if why == "nanos":
                        converted.append(Conversion(f.name, T.LongType(), nanos=True))
                    elif why and was is not None and _arrow_mismatch(was, columns[f.name], stored) is None:
                        converted.append(Conversion(f.name, was))
                    elif why:
                        problems.append(why)
            verdict = ("; ".join(problems), ()) if problems else ("", tuple(converted))  # type: ignore[assignment]
    _verdicts[cache_key] = verdict
    return verdict


def landed_files(source: Source, batches: list[str] | None = None) -> LandedFiles:
    """Every landed file of the source (of `batches` only, when given), sorted by the contract: checked when a batch
    is read, from each file's Parquet footer, before anything is built from it."""
    files = LandedFiles()
    wanted = None if batches is None else {f"{BATCH_PREFIX}{b}" for b in batches}
    for entry in storage.listing(landing_path(source.name)):
        if entry.name.startswith((".", "_")):  # writers' markers (_SUCCESS, .crc files)
            continue
        if not (entry.is_folder and _batch_day(entry.name)):
            if batches is None:
                files.refused.append(
                    Refusal(
                        source.name, entry.name, None, f"not a batch folder: its name is not {BATCH_PREFIX}YYYY-MM-DD"
                    )
                )
            continue
        if wanted is not None and entry.name not in wanted:
            continue
        for file in _batch_files(entry):
            reason, converted = _file_verdict(file, source, _batch_day(entry.name))
            if reason:
                below = storage.relative_to(file.path, entry.path)
                files.refused.append(Refusal(source.name, f"{entry.name}/{below}", batch_name(entry), reason))
            elif converted:
                files.converted.setdefault(converted, []).append(file.path)
            else:
                files.plain.append(file.path)
    return files


def refused_files(source: Source) -> list[Refusal]:
    return landed_files(source).refused


def read_landing(spark: SparkSession, source: Source, batches: list[str] | None = None) -> DataFrame:
    """Every landed row version with its batch (`ingest_date`) and file (`source_file`, relative to the source's
    folder). With `batches`, only those batch folders are read (a restatement reads what landed lately, not the
    history). Files the contract refuses are not read; for events each is one row of its batch, with every column
    null and `refused` saying why, which quarantine keeps (nothing disappears without a trace)."""
    _landed_batch_dirs(source)
    return _rows(spark, source, batches, landed_files(source, batches))


def _batch_files(batch_dir: StoredEntry) -> list[StoredEntry]:
    """The files of a batch folder, at any depth, but for writers' markers (_SUCCESS, .crc files)."""
    return [f for f in storage.files_below(batch_dir.path) if not f.name.startswith((".", "_"))]


def _landed_batch_dirs(source: Source) -> list[StoredEntry]:
    """The source's batch folders; refused when there is none, since a build would then read nothing."""
    dirs = batch_dirs(source)
    if not dirs:
        raise LandingError(f"no landed batches under {landing_path(source.name)}: land some first (`generate`)")
    return dirs


@dataclass
class LandingRead:
    """A build's read of the landing: its rows (as read_landing reads them), and the batches and bytes it reads, taken
    from the files listed for the read. Not from the rows' plan (`DataFrame.inputFiles`): once an equal read is cached
    (on a warm engine, by any of its sessions), Spark plans the cache instead, and the plan names no file."""

    rows: DataFrame
    batches: list[str]  # the batches of the files read
    scan: Scan


def landing_read(spark: SparkSession, source: Source, batches: list[str] | None = None) -> LandingRead:
    """read_landing's rows of `batches` (every batch when None), with what they read."""
    dirs = _landed_batch_dirs(source)
    files = landed_files(source, batches)
    read = [*files.plain, *(f for paths in files.converted.values() for f in paths)]
    every = {f.path: f.size for d in dirs for f in _batch_files(d)}
    read_batches = sorted({_batch_of_file(f) for f in read})
    scan = Scan(
        f"landing/{source.name}",
        len(read),
        len(every),
        sum(every[f] for f in read),
        sum(every.values()),
        len(read_batches),
        len(dirs),
    )
    return LandingRead(_rows(spark, source, batches, files), read_batches, scan)


def _rows(spark: SparkSession, source: Source, batches: list[str] | None, files: LandedFiles) -> DataFrame:
    """The rows of read_landing, from `files`, the listing of the batches read."""
    root = landing_path(source.name)
    schema = T.StructType([*source.schema.fields, T.StructField(BATCH_COLUMN, T.DateType())])

    def with_file(df: DataFrame) -> DataFrame:
        # The file name relative to the source's folder, so the same landing copied to another lake gives the same
        # rows.
        return df.withColumn(FILE_COLUMN, F.substring_index(F.col("_metadata.file_path"), f"/{source.name}/", -1))

    reader = spark.read.option("basePath", root)
    if files.plain and not files.refused and not files.converted:
        # Every file as the contract says: Spark lists the folders itself.
        paths = [root] if batches is None else [f"{root}/{BATCH_PREFIX}{b}" for b in batches]
        parts = [with_file(reader.schema(schema).parquet(*paths))]
    else:
        parts = [with_file(reader.schema(schema).parquet(*files.plain))] if files.plain else []
        for conversions, paths in files.converted.items():
            stored = {c.column: c.stored for c in conversions}
            as_stored = T.StructType(
                [T.StructField(f.name, stored[f.name]) if f.name in stored else f for f in schema.fields]
            )
            df = with_file(reader.schema(as_stored).parquet(*paths))
            for c in conversions:
                df = df.withColumn(c.column, c.converted(schema[c.column].dataType))
            parts.append(df)
    if not parts:
        empty = T.StructType([*schema.fields, T.StructField(FILE_COLUMN, T.StringType())])
        parts = [spark.createDataFrame([], empty)]
    df = parts[0]
    for part in parts[1:]:
        df = df.unionByName(part)
    df = source.with_day(df).withColumn(REFUSED, F.lit(None).cast("string"))
    refused = [r for r in files.refused if r.batch is not None]
    if source.kind is SourceKind.EVENTS and refused:
        refused_rows = spark.createDataFrame(
            [(date.fromisoformat(r.batch), r.file, f"{REFUSED_FILE}: {r.reason}") for r in refused if r.batch],
            f"{BATCH_COLUMN} date, {FILE_COLUMN} string, {REFUSED} string",
        )
        df = df.unionByName(refused_rows, allowMissingColumns=True)
    return df


def _batch_of_file(file: str) -> str:
    return next(p for p in file.split("/") if p.startswith(BATCH_PREFIX))[len(BATCH_PREFIX) :]


def assert_new_batches(df: DataFrame, source: Source) -> list[str]:
    """The batches (`ingest_date`s) in `df`; landed batches are immutable, so any that already exists is refused
    instead of silently changing history."""
    ingest_dates = sorted(r[0].isoformat() for r in df.select(BATCH_COLUMN).distinct().collect())
    existing = {batch_name(p) for p in batch_dirs(source)}
    clash = sorted(set(ingest_dates) & existing)
    if clash:
        raise LandingError(f"batches already landed for {source.name}: {', '.join(clash[:5])}; landing is append-only")
    return ingest_dates


def land(batches: Mapping[Source, DataFrame]) -> dict[str, list[str]]:
    """Land new batches, per source a DataFrame of its schema's columns and an `ingest_date` column. Every clash is
    checked before anything is written, so a refused landing leaves nothing half-written. Returns source -> the
    batches landed."""
    landed = {source.name: assert_new_batches(df, source) for source, df in batches.items()}
    for source, df in batches.items():
        (
            df.select(*source.landed_columns, BATCH_COLUMN)
            .repartition(BATCH_COLUMN)  # one file per batch
            .write.mode("append")
            .partitionBy(BATCH_COLUMN)
            .parquet(landing_path(source.name))
        )
    return landed


def contract_breaks(schema: T.StructType, source: Source) -> list[str]:
    """How rows of `schema` break `source`'s contract: a column missing, one it does not declare, one of another type
    (what a landed file is refused for; nulls and values breaking its rules are quarantine's)."""
    declared = {f.name: f.dataType for f in source.schema.fields}
    given = {f.name: f.dataType for f in schema.fields}
    found = [f"missing column {c}" for c in declared if c not in given]
    found += [f"unexpected column {c}" for c in given if c not in declared]
    found += [
        f"column {c} is {given[c].simpleString()}, the contract says {t.simpleString()}"
        for c, t in declared.items()
        if c in given and given[c] != t
    ]
    return found


def land_batch(source: Source, rows: DataFrame, batch: date) -> str:
    """Land `rows` of `source` as a new, immutable batch of day `batch` (`landing/<source>/ingest_date=<batch>/`):
    refused, with nothing written, when their columns break the source's contract or the batch exists already.
    Returns the batch. What the landing then holds is read like any producer's file; the late-data sensor finds
    the new batch (`restate` publishes it now)."""
    breaks = contract_breaks(rows.schema, source)
    if breaks:
        raise LandingError(f"rows for {source.name} break its contract: {'; '.join(breaks)}; nothing landed")
    land({source: rows.withColumn(BATCH_COLUMN, F.lit(batch))})
    return batch.isoformat()


def event_day(source: Source, partitions: Partitions) -> Column:
    """The day a landed row belongs to, as its landing asset is partitioned: an event's day; the day a dimension's
    version takes effect (versions dated before the first partition take effect on it)."""
    if source.kind is SourceKind.EVENTS:
        return F.col(source.day)
    return F.greatest(F.to_date(source.day), F.lit(partitions.first_day))


def day_versions(
    spark: SparkSession,
    source: Source,
    partitions: Partitions,
    days: Iterable[date] | None = None,
    batches: list[str] | None = None,
) -> dict[date, str]:
    """The data version of each landed day (of `days`, or every day in the partitions): a SHA-256 of the batches that
    hold rows for the day and how many each holds. Batches are immutable and only ever added, so a day's version
    changes exactly when a batch adds rows to it, and observing twice gives the same versions. Reads the day column
    only, of `batches` when given (they must include every batch holding rows of `days`); rows with no valid day are
    quarantine's and have no landing day."""
    if not batch_dirs(source) or batches == []:
        return {}
    day = event_day(source, partitions)
    rows = read_landing(spark, source, batches).where(day.between(partitions.first_day, partitions.last_day))
    if days is not None:
        wanted = sorted(set(days))
        if not wanted:
            return {}
        rows = rows.where(day.isin(wanted))
    counts = rows.groupBy(day.alias("day"), F.col(BATCH_COLUMN).alias("batch")).count().collect()
    per_day: dict[date, list[str]] = defaultdict(list)
    for r in counts:
        per_day[r.day].append(f"{r.batch.isoformat()}:{r['count']}")
    return {d: hashlib.sha256(";".join(sorted(parts)).encode()).hexdigest() for d, parts in sorted(per_day.items())}
