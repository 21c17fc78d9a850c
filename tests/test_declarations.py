"""What a pipeline may declare of its sources, and what the machinery then serves: a declaration it cannot serve is
refused when it is declared, in one line naming the field; every declaration it accepts backfills, checks and finds
its stale days. The slow test declares one source for each allowed way of naming a source's columns (events and
dimensions; the newest version decided by a column of its own, by the load time, by the day, by a counter; a
dimension's day a date, a timestamp, or its load time) and runs `backfill`, `check`, `stale`, `restate` on them all."""

import contextlib
import io
import json
import sys
import textwrap
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from pyspark.sql import types as T

from exact_backfills import Calendar, DeclarationError, Pipeline, Source, SourceKind, Staging, land_batch
from exact_backfills.cli import main
from exact_backfills.landing import contract_breaks
from exact_backfills.pipelines import load
from resources.lake import REPO_ROOT

START, END = date(2025, 1, 1), date(2025, 1, 4)
CALENDAR = Calendar(first_day=date(2025, 1, 1), last_day=date(2025, 3, 31))


def _source(**overrides) -> Source:
    fields = [
        T.StructField("id", T.StringType(), False),
        T.StructField("day", T.DateType(), False),
        T.StructField("label", T.StringType()),
        T.StructField("attributes", T.MapType(T.StringType(), T.StringType())),
        T.StructField("loaded_at", T.TimestampType(), False),
    ]
    declared = dict(name="things", schema=T.StructType(fields), key=["id"], day="day", newest="loaded_at")
    return Source(**{**declared, "loaded_at": "loaded_at", **overrides})


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        ({"newest": "label"}, "its newest column label is string: versions are ordered by a timestamp, a date or a"),
        ({"key": ["attributes"]}, "its key column attributes is map<string,string>, which cannot be compared as a key"),
        ({"newest": "updated_at"}, "updated_at is not a column of its schema"),
        ({"loaded_at": "day"}, "its load time day is date, not a timestamp"),
        # a day taken from an instant (`day_of`): computed, not in the files; from a timestamp, in the calendar's zone
        ({"day_of": "loaded_at"}, "its day day is computed from loaded_at: it cannot be a column of its files too"),
        ({"day": "on", "day_of": "label"}, "its day_of label is string, not a timestamp"),
        ({"day": "on", "day_of": "loaded_at", "timezone": "Mars/Olympus"}, "its timezone 'Mars/Olympus' is not an"),
        ({"day": "on", "day_of": "loaded_at", "timezone": "America/New_York"}, "its days are America/New_York's, its"),
        ({"day": "on", "day_of": "loaded_at", "kind": SourceKind.DIMENSION}, "a dimension's day is a column of its"),
    ],
)
def test_a_source_the_machinery_cannot_serve_is_refused_when_declared_in_one_line_naming_the_field(overrides, said):
    source = _source(**overrides)
    with pytest.raises(DeclarationError) as refused:
        Pipeline("refused", sources=[source], tables=[Staging("stg_things", source=source)], calendar=CALENDAR)
    assert str(refused.value).startswith(f"pipeline 'refused': source things: {said}")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("calendar", "said"),
    [
        (
            Calendar(date(2025, 3, 31), date(2025, 1, 1)),
            "its calendar's last day 2025-01-01 is before its first day 2025",
        ),
        (Calendar("2025-01-01", date(2025, 3, 31)), "its calendar's first and last day are dates, not ('2025-01-01', "),
        ("2025-01-01..2025-03-31", "its calendar '2025-01-01..2025-03-31' is not a Calendar(first_day=..., last_day="),
        (Calendar(date(2025, 1, 1), timezone="Europe/Atlantis"), "its calendar's timezone 'Europe/Atlantis' is not an"),
        (None, "it declares no calendar: Pipeline(..., calendar=Calendar(first_day=..., timezone=...))"),
    ],
)
def test_a_calendar_the_machinery_cannot_serve_is_refused_when_declared_in_one_line(calendar, said):
    source = _source()
    with pytest.raises(DeclarationError) as refused:
        Pipeline("refused", sources=[source], tables=[Staging("stg_things", source=source)], calendar=calendar)
    assert str(refused.value).startswith(f"pipeline 'refused': {said}")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("declared", [("count(1)",), ("count(1)", 1), "count(1)", ["count(1)", "count(1)"]])
def test_a_reconciled_measure_is_a_measure_or_its_pair_of_aggregates_and_anything_else_is_refused(declared):
    from exact_backfills import Measure, Reconcile

    both = Reconcile("items", {"items": ("sum(item_count)", "count(1)"), "net": Measure("sum(net)", "sum(net)")})
    assert both.measures == {"items": Measure("sum(item_count)", "count(1)"), "net": Measure("sum(net)", "sum(net)")}
    assert both.measures["items"].upstream_aggregate == "count(1)"
    with pytest.raises(DeclarationError) as refused:
        Reconcile("items", {"items": declared})
    assert str(refused.value) == (
        f"Reconcile('items'): measure 'items' is {declared!r}, not a Measure or a pair of SQL aggregates (this "
        "table's, the upstream's)"
    )


def test_rows_landed_as_a_batch_must_have_the_contracts_columns_and_types():
    source = _source()
    assert contract_breaks(source.schema, source) == []
    other = T.StructType(
        [
            *(f for f in source.schema.fields if f.name not in ("label", "day")),
            T.StructField("day", T.TimestampType()),
            T.StructField("coupon", T.StringType()),
        ]
    )
    assert contract_breaks(other, source) == [
        "missing column label",
        "unexpected column coupon",
        "column day is timestamp, the contract says date",
    ]


def test_everything_the_pipelines_guide_names_is_imported_from_exact_backfills():
    """docs/pipelines.md lists what a pipeline's author imports; each is exported, and each export is listed."""
    import exact_backfills

    guide = (REPO_ROOT / "docs" / "pipelines.md").read_text()
    listed = guide.split("(everything above is imported from\n`exact_backfills`: ", 1)[1].split("):", 1)[0]
    names = {n.strip(" `").removeprefix("and `") for n in listed.replace("\n", " ").split(",")}
    assert names == set(exact_backfills.__all__)
    assert all(getattr(exact_backfills, n) is not None for n in names)  # each imported, the lazy ones too


# The user's package: one source per way of naming a source's columns, each taken into the lake by its staging table.
PIPELINE = """
from datetime import date

from pyspark.sql import types as T

from exact_backfills import Calendar, DayCheck, Pipeline, Source, SourceKind, Staging


def fields(*more):
    return T.StructType(
        [T.StructField("id", T.StringType(), False), *more, T.StructField("loaded_at", T.TimestampType(), False)]
    )


DAY = T.StructField("day", T.DateType(), False)
AMOUNT = T.StructField("amount", T.DecimalType(10, 2))
UPDATED = T.StructField("updated_at", T.TimestampType(), False)
REGION = T.StructField("region", T.StringType())
CHANGED = T.StructField("changed_at", T.TimestampType(), False)
VERSION = T.StructField("version", T.LongType(), False)
EVENTS, DIMENSION = SourceKind.EVENTS, SourceKind.DIMENSION

SOURCES = [
    Source("ev_own", fields(DAY, AMOUNT, UPDATED), ["id"], "day", newest="updated_at", loaded_at="loaded_at"),
    Source("ev_loaded", fields(DAY, AMOUNT), ["id"], "day", newest="loaded_at", loaded_at="loaded_at"),
    Source("ev_by_day", fields(DAY, AMOUNT), ["id"], "day", newest="day", loaded_at="loaded_at"),
    Source("ev_counter", fields(DAY, AMOUNT, VERSION), ["id"], "day", newest="version", loaded_at="loaded_at"),
    Source("dim_own", fields(DAY, REGION, UPDATED), ["id"], "day", "updated_at", "loaded_at", DIMENSION),
    Source("dim_stamped", fields(CHANGED, REGION), ["id"], "changed_at", "changed_at", "loaded_at", DIMENSION),
    Source("dim_loaded", fields(DAY, REGION), ["id"], "day", "loaded_at", "loaded_at", DIMENSION),
    Source("dim_on_load", fields(REGION), ["id"], "loaded_at", "loaded_at", "loaded_at", DIMENSION),
]

# A check of the user's whose figure raises on every row: it cannot be evaluated, so it fails, saying why.
RAISES = DayCheck("raises", figures={"boom": "max(raise_error('no figure today'))"}, passes=lambda figures: True)

pipeline = Pipeline(
    name="declared",
    sources=SOURCES,
    calendar=Calendar(first_day=date(2025, 1, 1), last_day=date(2025, 3, 31)),
    tables=[Staging(f"stg_{s.name}", source=s, checks=[RAISES] if s.name == "ev_own" else []) for s in SOURCES],
)
"""
REFERENCE = "declared_pipeline:pipeline"


def _at(day: date, hour: int) -> datetime:
    return datetime.combine(day, datetime.min.time(), tzinfo=UTC) + timedelta(hours=hour)


def _row(source: Source, key: str, day: date, loaded: datetime, value: int) -> tuple:
    """A landed row of `source`'s contract for `key` on `day`, loaded at `loaded`, its amount or region `value`."""
    columns = {
        "id": key,
        "day": day,
        "amount": Decimal(value),
        "region": f"r{value}",
        "updated_at": _at(day, value),
        "changed_at": _at(day, 12),
        "version": value,
        "loaded_at": loaded,
    }
    return tuple(columns[c] for c in source.columns)


def _land(spark, source: Source, rows: list[tuple], batch: date) -> None:
    land_batch(source, spark.createDataFrame(rows, source.schema), batch)


def _first_batch(spark, declared: Pipeline) -> None:
    """Two keys on every day (a dimension: two keys' first versions on the first day), landed the day after."""
    for source in declared.sources:
        if source.kind is SourceKind.DIMENSION:
            loaded = _at(START, 1) if source.day == "loaded_at" else _at(START + timedelta(days=1), 1)
            rows = [_row(source, k, START, loaded, 1) for k in ("a", "b")]
            _land(spark, source, rows, START if source.day == "loaded_at" else START + timedelta(days=1))
            continue
        days = [START + timedelta(days=n) for n in range((END - START).days + 1)]
        rows = [_row(source, f"{k}{d:%d}", d, _at(END + timedelta(days=1), 1), 1) for d in days for k in "ab"]
        _land(spark, source, rows, END + timedelta(days=1))


LATE_BATCH = END + timedelta(days=2)
CORRECTED, ADDED, NEW_VERSION = START + timedelta(days=1), START + timedelta(days=2), START + timedelta(days=2)


def _late_batch(spark, declared: Pipeline) -> dict[str, list[str]]:
    """A correction of a key of day 2 and a new key on day 3 (events); a new version of key a taking effect on day 3
    (dimensions): the stale days each staging table should show."""
    loaded = _at(LATE_BATCH, 2)
    expected = {}
    for source in declared.sources:
        if source.kind is SourceKind.DIMENSION:
            on_load = source.day == "loaded_at"
            when = _at(NEW_VERSION, 3) if on_load else loaded
            row = _row(source, "a", NEW_VERSION, when, 2)
            _land(spark, source, [row], NEW_VERSION if on_load else LATE_BATCH)
            expected[f"stg_{source.name}"] = [NEW_VERSION.isoformat()]
            continue
        rows = [_row(source, f"a{CORRECTED:%d}", CORRECTED, loaded, 2), _row(source, "late", ADDED, loaded, 3)]
        _land(spark, source, rows, LATE_BATCH)
        expected[f"stg_{source.name}"] = [CORRECTED.isoformat(), ADDED.isoformat()]
    return expected


def _said(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(["--pipeline", REFERENCE, *argv])
    return code, out.getvalue()


@pytest.fixture(scope="module")
def declared(tmp_path_factory):
    root = tmp_path_factory.mktemp("users")
    (root / "declared_pipeline.py").write_text(textwrap.dedent(PIPELINE))
    sys.path.insert(0, str(root))
    try:
        yield load(REFERENCE)
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("declared_pipeline", None)


@pytest.mark.slow
def test_every_allowed_way_of_naming_a_sources_columns_backfills_checks_and_shows_its_stale_days(spark, lake, declared):
    _first_batch(spark, declared)
    code, said = _said("backfill", "--start", str(START), "--end", str(END))
    assert code == 0, said
    code, said = _said("check", "--start", str(START), "--end", str(END))
    failing = [line.strip() for line in said.splitlines() if "FAIL" in line]
    days = [START + timedelta(days=n) for n in range((END - START).days + 1)]
    assert code == 1 and len(failing) == len(days), said  # the user's check that raises, and nothing else
    assert all(
        f"FAIL raises {d}: could not be evaluated: " in f and "no figure today" in f
        for d, f in zip(days, failing, strict=True)
    )
    assert said.count("check results passed") == len(declared.every_table), said  # quarantine tables too

    expected = _late_batch(spark, declared)
    code, said = _said("stale", "--json")
    assert code == 0, said
    stale = {table: sorted(days) for table, days in json.loads(said).items()}
    assert stale == expected

    code, said = _said("restate")
    assert code == 0, said
    code, said = _said("stale", "--json")
    assert (code, json.loads(said)) == (0, {})
