"""A source of a pipeline: a dataset landed as immutable batches, its contract, and how each landed row finds its
day; and the columns the machinery adds to a landed row. Declared in a `Pipeline` (declare.py)."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from enum import Enum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

# The columns the machinery adds to a landed row: its batch (the folder's day) and its file, relative to the source's
# folder.
BATCH_COLUMN = "ingest_date"
FILE_COLUMN = "source_file"
# A dimension's versions, by the day each takes effect.
VALID_FROM = "valid_from"
# Quarantine's day column: the day a rejected row is filed on.
QUARANTINE_DAY = "quarantine_day"
# The run that wrote a quarantined row.
RUN_COLUMN = "run_id"

# The types a source's `newest` may have: what orders a key's versions, the later winning.
ORDERED_VERSIONS = (T.TimestampType, T.TimestampNTZType, T.DateType, T.IntegralType, T.DecimalType)
# The types a key column may have: compared as they are, so that the same key is the same key on every run.
KEY_TYPES = (T.StringType, T.IntegralType, T.DecimalType, T.DateType, T.TimestampType, T.BooleanType, T.BinaryType)


class SourceKind(Enum):
    """What a source's rows are, and so how its staging table holds them."""

    EVENTS = "events"  # each key has one current version (the newest), on the day its day column gives
    DIMENSION = "dimension"  # each version takes effect on its day and holds until the key's next version


@dataclass(frozen=True)
class Rule:
    """Rows of a source that break its contract beyond the schema's types: quarantined with `reason`. `breaks` is a
    SQL condition over the row's columns, true on a row that breaks it."""

    reason: str
    breaks: str


@dataclass(frozen=True)
class ColumnAdded:
    """A nullable column the contract gained after batches landed without it: batches before `first_batch` may lack
    it (their rows read it as null, and keep counting); from `first_batch` on, a file without it is refused."""

    name: str
    first_batch: date


@dataclass(frozen=True)
class ColumnDropped:
    """A column the contract dropped after batches landed with it: files of batches up to `last_batch` may still carry
    it (it is not read: their other columns keep counting); from the batch after on, a file with it is refused."""

    name: str
    last_batch: date


@dataclass(frozen=True)
class ColumnRetyped:
    """A column the contract widened after batches landed with its former type `was`: files of batches up to
    `last_batch` may still store it so (read as `was`, then cast to the contract's type, which must widen it: no value
    changes); from the batch after on, a file storing it as `was` is refused."""

    name: str
    was: T.DataType
    last_batch: date


_INTEGER_DIGITS: dict[type[T.DataType], int] = {T.ByteType: 3, T.ShortType: 5, T.IntegerType: 10, T.LongType: 20}


def widens(was: T.DataType, now: T.DataType) -> bool:
    """Whether every value of `was` reads the same as `now`: a wider integer, a double from a float or a smaller
    integer, a decimal with at least as many integer and fraction digits."""
    digits = _INTEGER_DIGITS
    if isinstance(now, T.DecimalType):
        if isinstance(was, T.DecimalType):
            return now.scale >= was.scale and now.precision - now.scale >= was.precision - was.scale
        return type(was) in digits and now.precision - now.scale >= digits[type(was)]
    if type(now) in digits:
        return type(was) in digits and digits[type(was)] < digits[type(now)]
    if isinstance(now, T.DoubleType):
        return isinstance(was, T.FloatType | T.ByteType | T.ShortType | T.IntegerType)
    return False


@dataclass(frozen=True)
class Source:
    """A dataset landed as immutable, append-only Parquet batches under `landing/<name>/ingest_date=D/`.

    - `schema`: the contract. A file whose columns or types differ is refused by name, never read.
    - `key`: the natural key; `newest`: the column deciding which version of a key is newest (later wins; then the
      later load time, the later file, and a hash of the row, so that every run resolves ties the same way).
    - `day`: the column giving a row's day: a date column for events; for a dimension, the date (or timestamp) its
      version takes effect (versions before the first partition take effect on it).
    - `day_of`: for events whose files carry an instant instead (a timestamp column), that column: `day` is then not
      landed but computed, the instant's date in `timezone` (the pipeline's calendar's), so a day ends at midnight
      there, a daylight-saving day having 23 or 25 hours.
    - `loaded_at`: the load time, a timestamp: the restatement watermark follows it, never the event's day.
    - `rules`: rows breaking the contract beyond its types, quarantined with the reason (events only). Rows with a
      null key, day or timestamp, a day outside the partitions, or a day after their load are quarantined too.
    - `columns_added`: nullable columns of `schema` the contract gained after batches landed without them.
    - `columns_dropped`: columns the contract no longer has, which batches landed before carry.
    - `columns_retyped`: columns the contract widened, which batches landed before store with their former type."""

    name: str
    schema: T.StructType
    key: Sequence[str]
    day: str
    newest: str
    loaded_at: str
    kind: SourceKind = SourceKind.EVENTS
    rules: Sequence[Rule] = ()
    description: str = ""
    day_of: str = ""
    timezone: str = "UTC"
    columns_added: Sequence[ColumnAdded] = ()
    columns_dropped: Sequence[ColumnDropped] = ()
    columns_retyped: Sequence[ColumnRetyped] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", tuple(self.key))
        object.__setattr__(self, "rules", tuple(self.rules))
        object.__setattr__(self, "columns_added", tuple(self.columns_added))
        object.__setattr__(self, "columns_dropped", tuple(self.columns_dropped))
        object.__setattr__(self, "columns_retyped", tuple(self.columns_retyped))

    def may_lack(self, column: str, batch: date | None) -> bool:
        """Whether a file of `batch` may lack `column`: one the contract gained after that batch."""
        return batch is not None and any(a.name == column and batch < a.first_batch for a in self.columns_added)

    def may_carry(self, column: str, batch: date | None) -> bool:
        """Whether a file of `batch` may carry `column`, not in the contract: one it dropped after that batch."""
        return batch is not None and any(d.name == column and batch <= d.last_batch for d in self.columns_dropped)

    def former_type(self, column: str, batch: date | None) -> T.DataType | None:
        """The type a file of `batch` may store `column` as instead of the contract's: its type before a widening."""
        found = [
            r.was for r in self.columns_retyped if r.name == column and batch is not None and batch <= r.last_batch
        ]
        return found[0] if found else None

    def as_versions(self, rows: DataFrame, *leading: str) -> DataFrame:
        """Staged or quarantined rows (`leading` columns first) as this contract's versions: a column the contract
        gained since they were written reads as null, as it does in the batches landed before it."""
        types = {f.name: f.dataType for f in self.schema.fields}
        gained = {a.name for a in self.columns_added} - set(rows.columns)
        return rows.select(
            *leading,
            *[F.lit(None).cast(types[c]).alias(c) if c in gained else F.col(c) for c in self.version_columns],
        )

    @property
    def columns(self) -> list[str]:
        """A landed row's columns: the files' and, when computed from `day_of`, its day."""
        return [*self.landed_columns, self.day] if self.day_of else self.landed_columns

    @property
    def landed_columns(self) -> list[str]:
        """The files' columns: the contract."""
        return self.schema.fieldNames()

    def with_day(self, rows: DataFrame) -> DataFrame:
        """Landed rows with their day: when computed, `day_of`'s date in `timezone` (a null instant, a null day)."""
        if not self.day_of:
            return rows
        return rows.withColumn(self.day, F.to_date(F.from_utc_timestamp(F.col(self.day_of), self.timezone)))

    @property
    def version_columns(self) -> list[str]:
        """A landed version as staging and quarantine keep it: the row, its batch and its file."""
        return [*self.columns, BATCH_COLUMN, FILE_COLUMN]

    def problems(self) -> list[str]:
        types = {f.name: f.dataType for f in self.schema.fields}
        if self.day_of:
            if self.day in types:
                return [f"its day {self.day} is computed from {self.day_of}: it cannot be a column of its files too"]
            found = self._day_of_problems(types)
            if found:
                return found
            types[self.day] = T.DateType()
        named = (*self.key, self.day, self.newest, self.loaded_at)
        found = [f"{c} is not a column of its schema" for c in dict.fromkeys(named) if c not in types]
        if found:
            return found
        if not self.key:
            found.append("no key")
        if self.kind is SourceKind.EVENTS and not isinstance(types[self.day], T.DateType):
            found.append(f"its day column {self.day} is {types[self.day].simpleString()}, not a date")
        if not isinstance(types[self.day], T.DateType | T.TimestampType):
            found.append(f"its day column {self.day} is {types[self.day].simpleString()}, not a date or timestamp")
        if not isinstance(types[self.loaded_at], T.TimestampType):
            found.append(f"its load time {self.loaded_at} is {types[self.loaded_at].simpleString()}, not a timestamp")
        if not isinstance(types[self.newest], ORDERED_VERSIONS):
            found.append(
                f"its newest column {self.newest} is {types[self.newest].simpleString()}: versions are ordered by a "
                "timestamp, a date or a number"
            )
        found += [
            f"its key column {c} is {types[c].simpleString()}, which cannot be compared as a key"
            for c in self.key
            if not isinstance(types[c], KEY_TYPES)
        ]
        clash = {BATCH_COLUMN, FILE_COLUMN, VALID_FROM, QUARANTINE_DAY, RUN_COLUMN, "reason", "refused"} & set(types)
        found += [f"its column {c} is a name the machinery adds" for c in sorted(clash)]
        if self.rules and self.kind is SourceKind.DIMENSION:
            found.append("a dimension has no quarantine: its rules would never apply")
        found += [
            f"its dropped column {d.name} is still a column of its schema"
            for d in self.columns_dropped
            if d.name in types
        ]
        return found + self._added_problems(named) + self._retyped_problems()

    def _retyped_problems(self) -> list[str]:
        fields = {f.name: f for f in self.schema.fields}
        found = []
        for retyped in self.columns_retyped:
            if retyped.name not in fields:
                found.append(f"its retyped column {retyped.name} is not a column of its schema")
            elif not widens(retyped.was, now := fields[retyped.name].dataType):
                found.append(
                    f"its retyped column {retyped.name} was {retyped.was.simpleString()}, which "
                    f"{now.simpleString()} does not widen: a retype keeps every landed value (a wider integer, "
                    "decimal or floating type); land the column under a new name instead"
                )
        return found

    def _added_problems(self, named: Sequence[str]) -> list[str]:
        fields = {f.name: f for f in self.schema.fields}
        found = []
        for added in self.columns_added:
            if added.name not in fields:
                found.append(f"its added column {added.name} is not a column of its schema")
            elif not fields[added.name].nullable:
                found.append(f"its added column {added.name} is not nullable: the batches before it read it as null")
            elif added.name in (*named, self.day_of):
                found.append(f"its added column {added.name} is a column every row needs (key, day, version or load)")
        return found

    def _day_of_problems(self, types: dict[str, T.DataType]) -> list[str]:
        if self.kind is not SourceKind.EVENTS:
            return ["a dimension's day is a column of its files (day_of is for events)"]
        if self.day_of not in types:
            return [f"its day_of {self.day_of} is not a column of its schema"]
        if not isinstance(types[self.day_of], T.TimestampType):
            return [f"its day_of {self.day_of} is {types[self.day_of].simpleString()}, not a timestamp"]
        try:
            ZoneInfo(self.timezone)
        except (ValueError, ZoneInfoNotFoundError):
            return [f"its timezone {self.timezone!r} is not an IANA timezone name (e.g. 'America/New_York')"]
        return []
