"""Day dependencies, pure and fast: which upstream days a day reads and which days a changed upstream day makes stale,
each the inverse of the other, clipped at the calendar's first and last days, and computed as Dagster's own partition
mapping computes them; what a declaration cannot ask for; and (slow) why the assets do not declare the mappings to
Dagster: its backfill daemon would split every chunk of a UI backfill."""

import logging
import textwrap
import time
from datetime import date, timedelta

import pytest
from dagster import AssetKey, DailyPartitionsDefinition, RunsFilter
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T

from exact_backfills import (
    AsOf,
    Calendar,
    DayDependency,
    DeclarationError,
    Pipeline,
    SameDay,
    Source,
    Staging,
    Table,
    TrailingDays,
    Window,
)

FIRST, LAST = date(2025, 1, 1), date(2025, 3, 31)
D = date(2025, 2, 10)


def _days(first: date, last: date) -> list[date]:
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


def _before(n: int) -> date:
    return D - timedelta(days=n)


def _after(n: int) -> date:
    return D + timedelta(days=n)


@pytest.mark.parametrize(
    ("dependency", "reads", "makes_stale"),
    [
        (SameDay(), [D], [D]),
        (TrailingDays(7), _days(_before(6), D), _days(D, _after(6))),
        (Window(-3, -1), _days(_before(3), _before(1)), _days(_after(1), _after(3))),  # a lag
        (Window(0, 2), _days(D, _after(2)), _days(_before(2), D)),  # a forward window
        (AsOf(), _days(FIRST, D), _days(D, LAST)),  # every day up to D
    ],
)
def test_a_day_reads_its_window_and_a_changed_upstream_day_makes_stale_the_days_whose_window_holds_it(
    dependency, reads, makes_stale
):
    assert dependency.upstream_days([D], FIRST, LAST) == reads
    assert dependency.downstream_days(D, FIRST, LAST) == makes_stale


def test_the_shorthands_are_windows():
    assert SameDay() == Window(0, 0) and TrailingDays(7) == Window(-6, 0) and TrailingDays(1) == SameDay()


def test_at_the_first_and_last_days_a_dependency_reaches_only_days_of_the_calendar():
    week = TrailingDays(7)
    assert week.upstream_days([FIRST], FIRST, LAST) == [FIRST]
    assert week.downstream_days(LAST, FIRST, LAST) == [LAST]
    assert week.downstream_days(LAST - timedelta(days=2), FIRST, LAST) == _days(LAST - timedelta(days=2), LAST)
    forward = Window(0, 2)
    assert forward.upstream_days([LAST], FIRST, LAST) == [LAST]
    assert forward.downstream_days(FIRST, FIRST, LAST) == [FIRST]
    assert Window(-3, -1).upstream_days([FIRST], FIRST, LAST) == []  # a lag on the first day reads nothing
    assert AsOf().upstream_days([FIRST], FIRST, LAST) == [FIRST]
    assert AsOf().downstream_days(LAST, FIRST, LAST) == [LAST]


def test_the_days_of_several_days_are_their_windows_merged_each_day_once():
    assert TrailingDays(7).upstream_days([_after(10), D, D], FIRST, LAST) == sorted(
        {*_days(_before(6), D), *_days(_after(4), _after(10))}
    )
    assert AsOf().downstream_of([_after(5), D], FIRST, LAST) == _days(D, LAST)
    assert Window(-1, -1).downstream_of([D, _after(1)], FIRST, LAST) == [_after(1), _after(2)]


DAYS = st.integers(0, (LAST - FIRST).days).map(lambda n: FIRST + timedelta(days=n))
WINDOWS = st.tuples(st.integers(-10, 10), st.integers(-10, 10)).map(lambda t: Window(min(t), max(t)))
DEPENDENCIES = st.one_of(WINDOWS, st.just(AsOf()), st.just(AsOf(on=["key"])))


@given(dependency=DEPENDENCIES, day=DAYS, upstream_day=DAYS)
def test_a_changed_upstream_day_makes_stale_exactly_the_days_that_read_it(
    dependency: DayDependency, day: date, upstream_day: date
):
    reads = upstream_day in dependency.upstream_days([day], FIRST, LAST)
    assert reads == (day in dependency.downstream_days(upstream_day, FIRST, LAST))


DAILY = DailyPartitionsDefinition(start_date=FIRST.isoformat(), end_date=(LAST + timedelta(days=1)).isoformat())


@settings(max_examples=60, deadline=None)
@given(dependency=DEPENDENCIES, day=DAYS)
def test_dagster_maps_a_day_to_the_days_the_dependency_reads_and_back_to_those_it_makes_stale(
    dependency: DayDependency, day: date
):
    mapping = dependency.to_dagster()
    one_day = DAILY.subset_with_partition_keys([day.isoformat()])
    upstream = mapping.get_upstream_mapped_partitions_result_for_partitions(one_day, DAILY, DAILY)
    assert sorted(upstream.partitions_subset.get_partition_keys()) == [
        d.isoformat() for d in dependency.upstream_days([day], FIRST, LAST)
    ]
    assert upstream.required_but_nonexistent_subset.is_empty  # clipped at the calendar's edges, as ours are
    downstream = mapping.get_downstream_partitions_for_partitions(one_day, DAILY, DAILY)
    assert sorted(downstream.get_partition_keys()) == [
        d.isoformat() for d in dependency.downstream_days(day, FIRST, LAST)
    ]


def _pipeline(upstream: dict[str, DayDependency]) -> Pipeline:
    fields = [
        T.StructField("id", T.StringType(), False),
        T.StructField("day", T.DateType(), False),
        T.StructField("loaded_at", T.TimestampType(), False),
    ]
    source = Source("things", T.StructType(fields), key=["id"], day="day", newest="loaded_at", loaded_at="loaded_at")
    table = Table("running_total", key=["id"], day_column="day", upstream=upstream, build=lambda s, d, r: r("x"))
    tables = [Staging("stg_things", source=source), table]
    return Pipeline("refused", sources=[source], tables=tables, calendar=Calendar(date(2025, 1, 1), date(2025, 3, 31)))


@pytest.mark.parametrize(
    ("upstream", "said"),
    [
        (
            {"stg_things": SameDay(), "running_total": Window(-1, -1)},
            "table running_total: it reads itself; a table built from its own days is not supported",
        ),
        ({"stg_things": Window(0, -1)}, "table running_total: its window on stg_things, D+0..D-1, ends before it"),
        ({"stg_things": TrailingDays(0)}, "table running_total: its window on stg_things, D+1..D+0, ends before it"),
        ({"stg_things": AsOf()}, "table running_total: it reads stg_things as of the day, which only a dimension"),
        ({"stg_things": 7}, "table running_total: 7 is not a day dependency"),
    ],
)
def test_a_day_dependency_the_machinery_cannot_serve_is_refused_in_one_line(upstream, said):
    with pytest.raises(DeclarationError) as refused:
        _pipeline(upstream)
    assert str(refused.value).startswith(f"pipeline 'refused': {said}"), str(refused.value)
    assert "\n" not in str(refused.value)


def test_each_window_says_what_day_d_reads_as_its_assets_page_shows_it():
    said = [Window(-6, 0), Window(-1, -1), Window(0, 2), SameDay(), AsOf(on=["user_id"])]
    assert [d.reads() for d in said] == ["D-6..D", "D-1", "D..D+2", "D", "as of D: every version up to D"]


def test_the_asset_of_a_table_over_a_window_shows_each_upstreams_days_in_dagster():
    from exact_backfills.location import definitions_of
    from examples.ml_features.pipeline import DIM_USER_STATUS, STG_APP_EVENTS, USER_DAILY_FEATURES
    from examples.ml_features.pipeline import pipeline as ml

    node = definitions_of(ml).resolve_asset_graph().get(AssetKey(USER_DAILY_FEATURES))
    assert {k: v for k, v in node.metadata.items() if k.startswith("reads ")} == {
        f"reads {STG_APP_EVENTS}": "D-6..D",
        f"reads {DIM_USER_STATUS}": "as of D: every version up to D",
    }


# Two copies of one multi_asset as the project declares its tables (daily, can_subset, chunked by
# BackfillPolicy.multi_run): `plain_*` with its dependencies as names, as the assets declare them, `mapped_*` with
# each dependency's partition mapping.
TOY = """
from dagster import AssetDep, AssetSpec, BackfillPolicy, DailyPartitionsDefinition, Definitions, MaterializeResult
from dagster import multi_asset
from exact_backfills import AsOf, SameDay, TrailingDays

DAILY = DailyPartitionsDefinition(start_date="2025-01-01", end_date="2025-04-01")
UPSTREAM = {"features": {"events": TrailingDays(7), "status": AsOf()}, "training": {"features": SameDay()}}


def step(prefix, mapped, policy=BackfillPolicy.multi_run(max_partitions_per_run=15)):
    def deps(table):
        return [AssetDep(prefix + u, partition_mapping=d.to_dagster()) if mapped else prefix + u
                for u, d in UPSTREAM.get(table, {}).items()]

    @multi_asset(name=prefix + "step", specs=[AssetSpec(prefix + t, deps=deps(t))
                 for t in ("events", "status", "features", "training")], partitions_def=DAILY,
                 backfill_policy=policy, can_subset=True)
    def publish(context):
        for key in context.selected_asset_keys:
            yield MaterializeResult(asset_key=key)

    return publish


# the other levers of a backfill policy: the whole range in one run, or a chunk larger than the range
defs = Definitions(assets=[step("plain_", False), step("mapped_", True),
                           step("onerun_", True, BackfillPolicy.single_run()),
                           step("bigchunk_", True, BackfillPolicy.multi_run(max_partitions_per_run=31))])
"""


@pytest.mark.slow
def test_dagster_runs_a_table_with_its_upstream_in_one_run_of_a_chunk_only_when_their_dependency_is_day_to_day(
    tmp_path,
):
    """Why the assets name their upstream tables without a partition mapping: the first tick of a 30-day backfill, in
    chunks of 15 days, requests each chunk as one run of every table; with the windows' mappings, only the tables
    reading nothing, the others waiting for later runs, even when one run may hold the whole range. When this fails,
    Dagster groups windows: declare them."""
    # Dagster's backfill daemon, one iteration, in this process (its private API: the public path is the UI's
    # launchPartitionBackfill and a running daemon, tests/test_ui.py).
    from dagster._core.execution.backfill import PartitionBackfill
    from dagster._core.test_utils import create_test_daemon_workspace_context, instance_for_test
    from dagster._core.workspace.load_target import PythonFileTarget
    from dagster._daemon.backfill import execute_backfill_iteration

    (tmp_path / "toy.py").write_text(textwrap.dedent(TOY))
    days = [d.isoformat() for d in _days(FIRST, FIRST + timedelta(days=29))]
    launcher = {"module": "dagster._core.test_utils", "class": "MockedRunLauncher"}  # records runs, starts none
    target = PythonFileTarget(
        str(tmp_path / "toy.py"), attribute="defs", working_directory=str(tmp_path), location_name="toy"
    )
    with instance_for_test(overrides={"run_launcher": launcher}) as instance:
        with create_test_daemon_workspace_context(target, instance) as workspace:
            graph = workspace.create_request_context().asset_graph
            runs = {}
            for prefix in ("plain_", "mapped_", "onerun_", "bigchunk_"):
                keys = [AssetKey(prefix + t) for t in ("events", "status", "features", "training")]
                backfill = PartitionBackfill.from_asset_partitions(
                    prefix, graph, days, keys, time.time(), {}, instance, False, None, None, None
                )
                instance.add_backfill(backfill)
                list(execute_backfill_iteration(workspace, logging.getLogger("backfill")))
                runs[prefix] = sorted(
                    (r.tags["dagster/asset_partition_range_start"], sorted(k.path[0] for k in r.asset_selection))
                    for r in instance.get_runs(RunsFilter(tags={"dagster/backfill": prefix}))
                )
    every_table = ["events", "features", "status", "training"]
    assert runs["plain_"] == [
        ("2025-01-01", [f"plain_{t}" for t in every_table]),
        ("2025-01-16", [f"plain_{t}" for t in every_table]),
    ]
    reading_nothing = ["mapped_events", "mapped_status"]
    assert runs["mapped_"] == [("2025-01-01", reading_nothing), ("2025-01-16", reading_nothing)]
    for prefix in ("onerun_", "bigchunk_"):  # nor does one run for the whole range bring them together
        assert runs[prefix] == [("2025-01-01", [f"{prefix}events", f"{prefix}status"])]
