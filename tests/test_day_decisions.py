"""The day decisions, pure and fast (no Spark session): which batches a restatement reads, where its window starts,
which changed days it rewrites, which become exceptions and which are held; which days of which tables a change
makes stale through each day dependency; what a rollback restores and rebuilds; how a range is chunked and scattered
days are written; what a refused change says."""

import sqlite3
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exact_backfills.builds import LandedBatches
from exact_backfills.checks import LATE_DATA, UP_TO_DATE, DayProfile, Outcome, keys, reconcile
from exact_backfills.cli import print_detection
from exact_backfills.declare import Reconcile, SameDay, TrailingDays
from exact_backfills.dependencies import carried_beyond, left_stale
from exact_backfills.landing import Refusal
from exact_backfills.landing_index import holding
from exact_backfills.late_data import DayChange, Detection, plan_restatement
from exact_backfills.partitions import bytes_by_day, chunks, days, days_per_run
from exact_backfills.publish import (
    Change,
    Hold,
    Operation,
    Rebuilt,
    Refused,
    Restated,
    Restored,
    at_once,
    checkpointed,
    day_ranges,
    reconciled_within,
)
from exact_backfills.restatement_days import (
    batches_to_read,
    classify_days,
    held_landings,
    in_window,
    read_name,
    window_start,
)
from exact_backfills.rollback import RollbackPlan, rollback_plan
from exact_backfills.verification import LandingState, landing_outcomes
from examples.ml_features.pipeline import STG_APP_EVENTS, TRAINING_SET, USER_DAILY_FEATURES
from examples.ml_features.pipeline import pipeline as ML
from resources.control import HeldDay, LateException, Watermark
from resources.delta_io import Scan, day_predicate, day_runs
from tests.support.lake import environment
from tests.support.orders import (
    BY_NAME,
    CUSTOMER_DAILY_FEATURES,
    DAILY_CATEGORY_REVENUE,
    DAILY_REVENUE,
    DIM_PRODUCT,
    FACT_ORDER_ITEM,
    ORDERS,
    PUBLISH_ORDER,
    QUARANTINE_ORDER_ITEMS,
    STG_ORDER_ITEMS,
)

D = date(2025, 1, 1)
MARTS = [DAILY_REVENUE, CUSTOMER_DAILY_FEATURES, DAILY_CATEGORY_REVENUE]
ORDER_TABLES = [STG_ORDER_ITEMS, FACT_ORDER_ITEM, *MARTS]
# Many examples: each is microseconds (the suite's `ci` profile keeps the Spark-backed property tests to a few).
MANY = settings(max_examples=80)


def day(n: int) -> date:
    return D + timedelta(days=n)


def at(n: int, hour: int = 0) -> datetime:
    return datetime.combine(day(n), datetime.min.time(), tzinfo=UTC) + timedelta(hours=hour)


def batches(*offsets: int) -> list[str]:
    return [day(n).isoformat() for n in offsets]


def read(source: str, *offsets: int) -> list[str]:
    """Batches as the watermark records them read."""
    return [read_name(source, b) for b in batches(*offsets)]


# Which batches a restatement reads.


def test_a_restatement_reads_new_batches_and_those_in_the_reprocess_window():
    watermark = Watermark(at(4), batches_read=read("items", 0, 2, 3, 4))
    # Never read (day 1), read but within 48 hours of the watermark (days 2..4), and new (day 5).
    assert batches_to_read("items", batches(0, 1, 2, 3, 4, 5), watermark, timedelta(hours=48)) == batches(1, 2, 3, 4, 5)


def test_the_first_restatement_reads_every_landed_batch():
    assert batches_to_read("items", batches(0, 1, 2), Watermark(), timedelta(hours=72)) == batches(0, 1, 2)


def test_without_a_reprocess_window_the_batch_of_the_watermarks_own_day_is_still_read_again():
    # The window is compared by day: the watermark's batch (day 4, read) is read again, older read batches are not.
    watermark = Watermark(at(4, hour=2), batches_read=read("items", 0, 1, 2, 3, 4))
    assert batches_to_read("items", batches(0, 1, 2, 3, 4, 5), watermark, timedelta(0)) == batches(4, 5)


def test_with_nothing_landed_since_the_watermark_and_nothing_unread_no_batch_is_read():
    watermark = Watermark(at(9), batches_read=read("items", 0, 1, 2))
    assert batches_to_read("items", batches(0, 1, 2), watermark, timedelta(hours=72)) == []


def test_a_batch_read_of_one_source_is_not_taken_as_read_of_another():
    watermark = Watermark(at(9), batches_read=read("products", 0, 1, 2))
    assert batches_to_read("items", batches(0, 1, 2), watermark, timedelta(hours=72)) == batches(0, 1, 2)


def test_the_batches_that_can_hold_a_day_are_those_indexed_with_it_and_every_one_not_indexed_yet():
    index = {"2025-01-01": {D}, "2025-01-02": {D + timedelta(days=1)}, "2025-01-03": {D, D + timedelta(days=2)}}
    landed = ["2025-01-01", "2025-01-02", "2025-01-03", "2025-01-04"]
    assert holding(index, landed, [D]) == ["2025-01-01", "2025-01-03", "2025-01-04"]
    assert holding(index, landed, [D + timedelta(days=5)]) == ["2025-01-04"]
    assert holding({}, landed, [D]) == landed  # nothing indexed: every batch
    assert holding(index, ["2025-01-02"], [D]) == []  # an indexed batch no longer landed is not read


# Where the restatement window starts.


def test_the_window_counts_back_from_the_newest_landed_batch_not_from_the_clock():
    assert window_start(batches(40, 3, 20), 30) == day(10)
    assert window_start(batches(0), 90) == day(-90)


def test_with_nothing_landed_there_is_no_window():
    assert window_start([], 30) is None


# Which changed days a restatement rewrites, which become exceptions, which are left held.


def test_a_changed_day_in_the_window_is_restated_and_one_older_than_the_window_becomes_an_exception():
    inside, first = DayChange(changed=2, batches={"b1"}), DayChange(changed=1)
    older = DayChange(changed=3, batches={"b1"})
    restated, outside = in_window(
        {
            STG_ORDER_ITEMS: {day(20): inside, day(10): first, day(9): older},
            DIM_PRODUCT: {day(12): DayChange(versions=1)},
        },
        day(10),
    )
    assert restated == {
        STG_ORDER_ITEMS: {day(20): inside, day(10): first},  # the window's first day is in it
        DIM_PRODUCT: {day(12): DayChange(versions=1)},
    }
    assert outside == {STG_ORDER_ITEMS: {day(9): older}}
    found = classify_days(restated, outside, pending={}, held_days=set())
    assert found.days == restated and found.outside == outside and found.held == {}


def test_a_day_left_pending_by_an_interrupted_restatement_is_rewritten_whatever_its_age():
    restated, outside = in_window({STG_ORDER_ITEMS: {day(2): DayChange(changed=1, batches={"b2"})}}, day(30))
    pending = {STG_ORDER_ITEMS: [day(2), day(5), day(40)], FACT_ORDER_ITEM: [day(5)]}
    found = classify_days(restated, outside, pending, held_days=set())
    assert found.days == {
        STG_ORDER_ITEMS: {
            day(2): DayChange(changed=1, batches={"b2"}, pending=True),  # its own changes too, and not an exception
            day(5): DayChange(pending=True),  # nothing new on it: rewritten all the same
            day(40): DayChange(pending=True),
        },
        FACT_ORDER_ITEM: {day(5): DayChange(pending=True)},  # each table's own pending days
    }
    assert found.outside == {} and found.held == {}


def test_each_table_keeps_its_own_exceptions_of_the_same_day():
    changed = {
        STG_ORDER_ITEMS: {day(1): DayChange(changed=2, batches={"b1"}), day(20): DayChange(changed=1, batches={"b1"})},
        DIM_PRODUCT: {day(1): DayChange(versions=1, batches={"b2"}), day(20): DayChange(versions=2, batches={"b2"})},
    }
    restated, outside = in_window(changed, day(10))
    assert restated == {
        STG_ORDER_ITEMS: {day(20): changed[STG_ORDER_ITEMS][day(20)]},
        DIM_PRODUCT: {day(20): changed[DIM_PRODUCT][day(20)]},
    }
    assert outside == {
        STG_ORDER_ITEMS: {day(1): changed[STG_ORDER_ITEMS][day(1)]},
        DIM_PRODUCT: {day(1): changed[DIM_PRODUCT][day(1)]},
    }


def test_a_day_held_since_a_rollback_is_neither_restated_nor_an_exception_but_reported_held():
    restated = {
        STG_ORDER_ITEMS: {day(15): DayChange(changed=2, batches={"b1"}), day(16): DayChange(changed=1)},
        DIM_PRODUCT: {day(15): DayChange(versions=1, batches={"b2"})},
    }
    outside = {STG_ORDER_ITEMS: {day(1): DayChange(changed=1, batches={"b1"})}}
    held_days = {day(1), day(15), day(17), day(50)}
    found = classify_days(restated, outside, {STG_ORDER_ITEMS: [day(17)]}, held_days)
    assert found.days == {STG_ORDER_ITEMS: {day(16): DayChange(changed=1)}, DIM_PRODUCT: {}}
    assert found.outside == {}
    assert found.held == {
        day(1): DayChange(changed=1, batches={"b1"}),  # too old, yet held: held is what it is
        day(15): DayChange(changed=2, versions=1, batches={"b1", "b2"}),  # every table's change of the day
        day(17): DayChange(pending=True),  # pending, yet held
    }  # a held day nothing changed (day 50) is not reported


def test_without_a_window_no_day_is_an_exception_and_the_inputs_are_left_as_they_were():
    changed = {STG_ORDER_ITEMS: {day(-400): DayChange(changed=1)}, DIM_PRODUCT: {day(-300): DayChange(versions=1)}}
    restated, outside = in_window(changed, None)
    found = classify_days(restated, outside, {STG_ORDER_ITEMS: [day(-200)]}, held_days=set())
    assert set(found.days[STG_ORDER_ITEMS]) == {day(-400), day(-200)} and set(found.days[DIM_PRODUCT]) == {day(-300)}
    assert found.outside == {}
    assert changed == {
        STG_ORDER_ITEMS: {day(-400): DayChange(changed=1)},
        DIM_PRODUCT: {day(-300): DayChange(versions=1)},
    }


def _changes(offsets: list[int], counter: str) -> dict[date, DayChange]:
    return {day(n): DayChange(**{counter: 1}, batches={f"b{n}"}) for n in offsets}


offsets = st.lists(st.integers(0, 60), unique=True, max_size=12)


@MANY
@given(order=offsets, product=offsets, pending=offsets, held=offsets, start=st.none() | st.integers(0, 60))
def test_every_changed_day_lands_in_exactly_one_place_and_no_change_is_lost_or_counted_twice(
    order, product, pending, held, start
):
    changed = {STG_ORDER_ITEMS: _changes(order, "changed"), DIM_PRODUCT: _changes(product, "versions")}
    first = day(start) if start is not None else None
    restated, outside = in_window(changed, first)
    found = classify_days(restated, outside, {STG_ORDER_ITEMS: [day(n) for n in pending]}, {day(n) for n in held})
    places = [*found.days.values(), *found.outside.values(), found.held]
    every = {day(n) for n in [*order, *product, *pending]}
    assert set().union(*places) == every
    assert set(found.held) == every & {day(n) for n in held}
    for table in changed:
        assert not set(found.held) & (set(found.days.get(table, {})) | set(found.outside.get(table, {})))
        # Restated days are in the window, or pending; exceptions are before it; pending days are never exceptions.
        assert all(first is None or d >= first or c.pending for d, c in found.days.get(table, {}).items())
        assert all(first is not None and d < first for d in found.outside.get(table, {}))
        assert not set(found.days.get(table, {})) & set(found.outside.get(table, {}))
    assert all(found.days[STG_ORDER_ITEMS][day(n)].pending for n in pending if day(n) not in found.held)
    for counter, table in (("changed", STG_ORDER_ITEMS), ("versions", DIM_PRODUCT)):
        assert sum(getattr(c, counter) for place in places for c in place.values()) == len(changed[table]), counter
    found_batches = set().union(*(c.batches for place in places for c in place.values()))
    assert found_batches == {f"b{n}" for n in {*order, *product}}


# What a changed upstream day makes stale through each day dependency.


def test_a_changed_day_makes_the_same_day_stale_or_the_days_of_the_trailing_windows_holding_it():
    assert SameDay().downstream_days(day(3), day(0), day(89)) == [day(3)]
    assert TrailingDays(7).downstream_days(day(3), day(0), day(89)) == [day(3 + i) for i in range(7)]
    last_days = [day(86), day(87), day(88), day(89)]
    assert TrailingDays(7).downstream_days(day(86), day(0), day(89)) == last_days  # not past the last
    assert TrailingDays(1).downstream_days(day(3), day(0), day(89)) == [day(3)]


def test_a_write_that_changes_a_day_leaves_stale_the_days_built_from_it_that_it_does_not_write():
    written = {t: [day(3), day(4)] for t in ORDER_TABLES}
    # The fact reads staging on the same day: written with it, nothing is left stale.
    assert left_stale(ORDERS, {STG_ORDER_ITEMS: [day(3)]}, written, day(89)) == {}
    # Staging alone written: the same days of the fact and of every mart built from it are.
    alone = {STG_ORDER_ITEMS: [day(3), day(4)]}
    assert left_stale(ORDERS, {STG_ORDER_ITEMS: [day(4)]}, alone, day(89)) == {
        t: {day(4)} for t in [FACT_ORDER_ITEM, *MARTS]
    }
    # The fact reads the products as of the day: every later day, up to the last, and what is built from them.
    later = {day(n) for n in range(5, 90)}
    found = left_stale(ORDERS, {DIM_PRODUCT: [day(3)]}, {**written, DIM_PRODUCT: [day(3)]}, day(89))
    assert found == {t: later for t in [FACT_ORDER_ITEM, *MARTS]}
    # A trailing window of 7 days: the later days of the windows holding the changed day, past the days written.
    first_three = {t: [day(0), day(1), day(2)] for t in ML.publish_order}
    assert left_stale(ML, {STG_APP_EVENTS: [day(0)]}, first_three, day(89)) == {
        USER_DAILY_FEATURES: {day(3), day(4), day(5), day(6)},
        TRAINING_SET: {day(3), day(4), day(5), day(6)},
    }
    # Nothing changed: nothing is left stale, whatever was written.
    assert left_stale(ORDERS, {}, written, day(89)) == {}


def test_a_rollback_or_release_rebuilds_every_published_day_built_from_a_day_it_changes_but_not_held_days():
    written = {t: [day(10)] for t in ML.publish_order}
    published = {t: days(day(0), day(40)) for t in ML.publish_order}
    window = [day(n) for n in range(11, 17)]
    # A changed day of the events: the six later days of the 7-day window, and the training set built from them.
    found = carried_beyond(ML, {STG_APP_EVENTS: [day(10)]}, written, day(40), published, held=set())
    assert found == {USER_DAILY_FEATURES: window, TRAINING_SET: window}
    # A changed day of a table read on the same day, by a table the change writes on that day: nothing beyond it.
    assert carried_beyond(ML, {USER_DAILY_FEATURES: [day(10)]}, written, day(40), published, set()) == {}
    assert carried_beyond(ML, {}, written, day(40), published, set()) == {}  # nothing changed
    # Held since a rollback, a day stays as it is; a day never published is not built by a rollback either.
    held = carried_beyond(ML, {STG_APP_EVENTS: [day(10)]}, written, day(40), published, held={day(13)})
    assert held == {t: [d for d in window if d != day(13)] for t in (USER_DAILY_FEATURES, TRAINING_SET)}
    short = {t: days(day(0), day(12)) for t in ML.publish_order}
    found = carried_beyond(ML, {STG_APP_EVENTS: [day(10)]}, written, day(40), short, held=set())
    assert found == {t: [day(11), day(12)] for t in (USER_DAILY_FEATURES, TRAINING_SET)}
    # A dimension read as of the day: every later published day.
    found = carried_beyond(
        ORDERS, {DIM_PRODUCT: [day(3)]}, {DIM_PRODUCT: [day(3)]}, day(9), {FACT_ORDER_ITEM: days(day(0), day(9))}, set()
    )
    assert found == {FACT_ORDER_ITEM: days(day(3), day(9))}


def test_a_rollback_restores_its_range_rebuilds_the_days_beyond_it_and_holds_only_its_range():
    plan = rollback_plan(ML, day(10), day(10), {STG_APP_EVENTS: 4, USER_DAILY_FEATURES: 7}, "run r9")
    plan = replace(plan, carried={USER_DAILY_FEATURES: [day(11), day(12)], TRAINING_SET: [day(11), day(12)]})
    change = plan.change(ML, batches="b1")
    assert change.days == {
        STG_APP_EVENTS: [day(10)],
        USER_DAILY_FEATURES: [day(10), day(11), day(12)],
        TRAINING_SET: [day(10), day(11), day(12)],
    }
    features = change.source(USER_DAILY_FEATURES)
    assert isinstance(features, Restored) and features.version == 7
    assert [features.restores(d) for d in (day(10), day(11))] == [True, False]  # restored, then rebuilt
    assert change.source(TRAINING_SET) == Rebuilt()
    assert change.hold is not None and change.hold.days == (day(10),)
    assert "beyond the range, rebuild user_daily_features on 2025-01-12..2025-01-13" in plan.describe()


def test_a_held_day_says_what_landed_for_it_once_not_once_per_table_carrying_it():
    staged = DayChange(changed=2, batches={"b9"})
    inside = {
        STG_ORDER_ITEMS: {day(3): staged, day(4): DayChange(changed=1)},
        DIM_PRODUCT: {day(3): DayChange(versions=1)},
    }
    assert held_landings(inside, {day(3)}) == {day(3): DayChange(changed=2, versions=1, batches={"b9"})}
    assert held_landings(inside, set()) == {}


def test_a_stale_day_says_why_in_the_check_result_and_a_day_too_old_to_restate_too():
    stale = {FACT_ORDER_ITEM: {day(5): DayChange(changed=2, batches={"b7"})}}
    outcomes = landing_outcomes(ORDERS, FACT_ORDER_ITEM, [day(5), day(6)], LandingState(stale=stale))
    assert [(o.check, o.day, o.passed) for o in outcomes] == [(UP_TO_DATE, day(5), False), (UP_TO_DATE, day(6), True)]
    assert outcomes[0].metadata == {"stale": True, "why": "2 key(s) added or corrected (batches b7)"}
    outside = {STG_ORDER_ITEMS: {day(5): DayChange(changed=1, batches={"b8"})}}
    late = landing_outcomes(ORDERS, STG_ORDER_ITEMS, [day(5)], LandingState(outside=outside))
    assert [(o.check, o.passed, o.metadata.get("why")) for o in late] == [
        (UP_TO_DATE, True, None),
        (LATE_DATA, False, "1 key(s) added or corrected (batches b8)"),
    ]


def test_what_stale_prints_names_a_watermark_not_set_yet_and_each_refused_file_with_its_source(capsys):
    detection = replace(
        _detection(landed={}),
        watermark=Watermark(None, batches_read=[], pending={}),
        refused=[Refusal("order_items", "ingest_date=2025-01-09/a.parquet", "2025-01-09", "missing column channel")],
    )
    print_detection(ORDERS, detection)
    said = capsys.readouterr().out
    assert said.startswith("watermark: none yet (no restatement has run: the next reads every batch once) -> "), said
    assert "  REFUSED order_items/ingest_date=2025-01-09/a.parquet: missing column channel: not read" in said, said


# The change a restatement plans.


def _detection(landed: dict[str, LandedBatches]) -> Detection:
    order_days = {day(12): DayChange(pending=True), day(14): DayChange(changed=2, batches=set(batches(21)))}
    return Detection(
        watermark=Watermark(at(20, 2), batches_read=read("order_items", 0, 20), pending={STG_ORDER_ITEMS: [day(12)]}),
        new_watermark_ts=at(21, 2),
        batches_read={"order_items": batches(21), "products": batches(21)},
        window_start=day(-69),
        days={
            **{t: dict(order_days) for t in ORDER_TABLES},
            DIM_PRODUCT: {day(13): DayChange(versions=1, batches=set(batches(21)))},
        },
        outside={
            STG_ORDER_ITEMS: {day(-80): DayChange(changed=1, quarantined=2, moved_out=1, batches=set(batches(21)))}
        },
        landed=landed,
    )


def test_a_restatement_writes_each_tables_stale_days():
    plan = plan_restatement(_detection(landed={}))
    assert plan.change.operation is Operation.RESTATEMENT
    assert plan.change.days == {**{t: [day(12), day(14)] for t in ORDER_TABLES}, DIM_PRODUCT: [day(13)]}
    # No batch kept: staging is built from the landing, as a backfill builds it.
    assert all(plan.change.source(t) == Rebuilt() for t in plan.change.tables())
    assert plan.exceptions == [LateException(STG_ORDER_ITEMS, day(-80), 4, day(21).isoformat(), day(-69))]
    # The intent: every day it writes is pending before the first write; once written, none is, and every batch is
    # read.
    assert plan.pending == {**{t: [day(12), day(14)] for t in ORDER_TABLES}, DIM_PRODUCT: [day(13)]}
    assert plan.watermark == Watermark(at(21, 2), sorted([*read("order_items", 0, 20, 21), *read("products", 21)]), {})


def test_staging_is_restated_from_the_batches_just_read_and_every_other_table_is_rebuilt():
    landed = LandedBatches(batches(21), rows=None, staged=None)  # what detection read (never read here)
    plan = plan_restatement(_detection({STG_ORDER_ITEMS: landed}))
    assert plan.change.source(STG_ORDER_ITEMS) == Restated(landed)
    assert {t: plan.change.source(t) for t in plan.change.tables() if t != STG_ORDER_ITEMS} == dict.fromkeys(
        [FACT_ORDER_ITEM, *MARTS, DIM_PRODUCT], Rebuilt()
    )


def test_a_restatement_with_nothing_changed_writes_nothing_and_only_advances_the_watermark():
    wm = Watermark(at(20, 2), read("order_items", 0, 20), {})
    found = Detection(
        wm, at(21, 2), {"order_items": batches(21), "products": []}, day(-69), {t: {} for t in PUBLISH_ORDER}
    )
    plan = plan_restatement(found)
    assert plan.change.days == {} and plan.change.tables() == [] and plan.exceptions == [] and plan.pending == {}
    assert plan.watermark == Watermark(at(21, 2), read("order_items", 0, 20, 21), {})


# How a change holds a table's staged rows: checkpointed (the plan cut) when computed from a table the change writes,
# since a write makes Spark recompute every cached frame computed from it, or when they are a few days' rows; cached
# (compressed by column) when they are most of the history's.


def _published_read_of(table: str) -> Scan:
    return Scan(table, files=1, files_total=1, bytes=1, bytes_total=1)


def _every_day() -> list[date]:
    return ORDERS.partitions.days


def _first_days(n: int) -> list[date]:
    return ORDERS.partitions.days[:n]


def test_the_whole_historys_staged_rows_are_cached_unless_computed_from_a_table_the_same_change_writes():
    whole = Change(Operation.BACKFILL, dict.fromkeys(PUBLISH_ORDER, _every_day()))
    fact = BY_NAME[FACT_ORDER_ITEM]
    # Built from the staged rows of staging and the dimension only.
    assert not checkpointed(ORDERS, fact, whole, [])
    # Joined with the dimension's days read as published, which the change writes.
    assert checkpointed(ORDERS, fact, whole, [_published_read_of(DIM_PRODUCT)])
    # A mart rebuilt alone reads the fact, which the change leaves alone.
    alone = Change(Operation.BACKFILL, {DAILY_REVENUE: _every_day()})
    assert not checkpointed(ORDERS, BY_NAME[DAILY_REVENUE], alone, [_published_read_of(FACT_ORDER_ITEM)])
    # A side table the change writes counts as written.
    staging = Change(Operation.BACKFILL, {STG_ORDER_ITEMS: _every_day()})
    assert checkpointed(ORDERS, BY_NAME[STG_ORDER_ITEMS], staging, [_published_read_of(QUARANTINE_ORDER_ITEMS)])


def test_a_few_days_staged_rows_are_checkpointed_whatever_they_are_computed_from():
    few = Change(Operation.BACKFILL, dict.fromkeys(PUBLISH_ORDER, _first_days(2)))
    assert all(checkpointed(ORDERS, BY_NAME[t], few, []) for t in PUBLISH_ORDER)


def test_a_restatements_staging_and_a_restored_table_read_their_own_rows_and_are_checkpointed():
    landed = LandedBatches(batches(21), rows=None, staged=None)
    restated = Change(Operation.RESTATEMENT, {STG_ORDER_ITEMS: _every_day()}, {STG_ORDER_ITEMS: Restated(landed)})
    assert checkpointed(ORDERS, BY_NAME[STG_ORDER_ITEMS], restated, [])
    restored = Change(Operation.ROLLBACK, {DIM_PRODUCT: _every_day()}, {DIM_PRODUCT: Restored(3)})
    assert checkpointed(ORDERS, BY_NAME[DIM_PRODUCT], restored, [])


def test_a_change_of_a_few_days_commits_its_tables_at_once_and_one_over_every_day_in_the_graphs_order():
    few = Change(Operation.BACKFILL, dict.fromkeys(PUBLISH_ORDER, _first_days(2)))
    assert at_once(few, ORDERS.partitions)
    every_day = Change(Operation.BACKFILL, {**few.days, FACT_ORDER_ITEM: _every_day()})
    assert not at_once(every_day, ORDERS.partitions)  # one table of many days is enough


def test_a_table_takes_its_upstreams_measures_from_the_upstreams_checks_only_when_the_change_stages_all_its_days():
    two = _first_days(2)
    whole = Change(Operation.BACKFILL, dict.fromkeys(PUBLISH_ORDER, two))
    found = reconciled_within(ORDERS, whole)
    assert {table: rec.upstream for table, rec in found.items()} == {
        FACT_ORDER_ITEM: STG_ORDER_ITEMS,
        **dict.fromkeys(MARTS, FACT_ORDER_ITEM),
    }
    assert all(rec is BY_NAME[table].reconcile for table, rec in found.items())
    # The marts alone read the fact as published: they aggregate it themselves.
    assert reconciled_within(ORDERS, Change(Operation.BACKFILL, dict.fromkeys(MARTS, two))) == {}
    # A day of the mart's that the change does not stage for the fact is read as published: the same.
    wider = Change(Operation.BACKFILL, {**whole.days, DAILY_REVENUE: _first_days(3)})
    assert DAILY_REVENUE not in reconciled_within(ORDERS, wider)


# What a rollback restores and rebuilds.

EVERY_TABLE_WRITTEN = {
    QUARANTINE_ORDER_ITEMS: 4,
    STG_ORDER_ITEMS: 6,
    DIM_PRODUCT: 2,
    FACT_ORDER_ITEM: 3,
    DAILY_REVENUE: 3,
    CUSTOMER_DAILY_FEATURES: 5,
    DAILY_CATEGORY_REVENUE: 1,
}


def test_rolling_back_a_run_restores_every_table_it_wrote_and_rebuilds_the_tables_derived_from_them():
    written = {FACT_ORDER_ITEM: 3, STG_ORDER_ITEMS: 6, QUARANTINE_ORDER_ITEMS: 4}  # a run of staging and the fact
    plan = rollback_plan(ORDERS, day(0), day(2), written, "run r1")
    assert (plan.start, plan.end, plan.days) == (day(0), day(2), [day(0), day(1), day(2)])
    # In the order they are committed: a side table just before its table.
    assert list(plan.restore.items()) == [(QUARANTINE_ORDER_ITEMS, 4), (STG_ORDER_ITEMS, 6), (FACT_ORDER_ITEM, 3)]
    assert plan.rebuild == MARTS
    assert plan.why == "rolled back to before run r1"


def test_rolling_back_the_dimension_rebuilds_the_fact_and_the_marts_but_not_staging():
    plan = rollback_plan(ORDERS, day(0), day(0), {DIM_PRODUCT: 2}, "run r2")
    assert plan.restore == {DIM_PRODUCT: 2} and plan.rebuild == [FACT_ORDER_ITEM, *MARTS]


def test_rolling_back_a_run_that_wrote_every_table_restores_them_all_and_rebuilds_none():
    plan = rollback_plan(ORDERS, day(0), day(0), EVERY_TABLE_WRITTEN, "backfill bf1")
    assert plan.restore == EVERY_TABLE_WRITTEN and plan.rebuild == []


@pytest.mark.parametrize(
    "table, restored, rebuilt",
    [
        # A mart: it, the fact, staging (with quarantine) and the dimension; the fact's other marts are rebuilt from
        # them.
        (
            DAILY_REVENUE,
            [QUARANTINE_ORDER_ITEMS, STG_ORDER_ITEMS, DIM_PRODUCT, FACT_ORDER_ITEM, DAILY_REVENUE],
            [CUSTOMER_DAILY_FEATURES, DAILY_CATEGORY_REVENUE],
        ),
        # The dimension: it and every table built from it; staging and quarantine left as they are.
        (DIM_PRODUCT, [DIM_PRODUCT, FACT_ORDER_ITEM, *MARTS], []),
        # Staging: with its quarantine, and every table built from it; the dimension left as it is.
        (STG_ORDER_ITEMS, [QUARANTINE_ORDER_ITEMS, STG_ORDER_ITEMS, FACT_ORDER_ITEM, *MARTS], []),
    ],
)
def test_narrowed_to_a_table_a_rollback_restores_that_table_what_it_is_built_from_and_what_it_builds(
    table, restored, rebuilt
):
    plan = rollback_plan(ORDERS, day(0), day(1), EVERY_TABLE_WRITTEN, "run r3", table)
    assert plan.restore == {t: EVERY_TABLE_WRITTEN[t] for t in restored}
    assert list(plan.restore) == restored and plan.rebuild == rebuilt


def test_narrowed_to_a_table_only_what_the_run_wrote_is_restored_and_the_rest_derived_from_it_is_rebuilt():
    written = {QUARANTINE_ORDER_ITEMS: 4, STG_ORDER_ITEMS: 6, FACT_ORDER_ITEM: 3, CUSTOMER_DAILY_FEATURES: 5}
    plan = rollback_plan(ORDERS, day(0), day(1), written, "run r4", STG_ORDER_ITEMS)
    assert plan.restore == written and plan.rebuild == [DAILY_REVENUE, DAILY_CATEGORY_REVENUE]


def test_a_rollback_of_a_run_that_wrote_nothing_is_refused_naming_the_run():
    with pytest.raises(ValueError, match="^run r5 committed nothing in any table$"):
        rollback_plan(ORDERS, day(0), day(1), {}, "run r5")
    with pytest.raises(ValueError, match="^backfill bf2 committed nothing in any table$"):
        rollback_plan(ORDERS, day(0), day(1), {}, "backfill bf2")


def test_a_rollback_narrowed_to_a_table_the_run_did_not_write_is_refused_naming_the_run_and_the_table():
    with pytest.raises(ValueError, match=f"^run r6 committed nothing in {DIM_PRODUCT}$"):
        rollback_plan(ORDERS, day(0), day(1), {STG_ORDER_ITEMS: 6, QUARANTINE_ORDER_ITEMS: 4}, "run r6", DIM_PRODUCT)


def test_a_side_table_is_restored_with_its_table_never_alone():
    with pytest.raises(ValueError, match="quarantine_order_items is written with stg_order_items"):
        rollback_plan(ORDERS, day(0), day(1), EVERY_TABLE_WRITTEN, "run r7", QUARANTINE_ORDER_ITEMS)
    with pytest.raises(ValueError, match="restored with stg_order_items, never alone"):
        rollback_plan(ORDERS, day(0), day(1), {QUARANTINE_ORDER_ITEMS: 4}, "run r8")
    with pytest.raises(ValueError, match="unknown table 'nope'"):
        rollback_plan(ORDERS, day(0), day(1), EVERY_TABLE_WRITTEN, "run r9", "nope")


def test_a_rollback_is_published_as_restored_tables_with_their_side_tables_rebuilt_tables_and_a_hold():
    plan = rollback_plan(
        ORDERS, day(0), day(2), {QUARANTINE_ORDER_ITEMS: 4, STG_ORDER_ITEMS: 6, FACT_ORDER_ITEM: -1}, "run r1"
    )
    change = plan.change(ORDERS, "2025-01-02, 2025-01-03")
    assert change.operation is Operation.ROLLBACK
    assert change.tables() == [STG_ORDER_ITEMS, FACT_ORDER_ITEM, *MARTS]
    assert change.days == {t: [day(0), day(1), day(2)] for t in change.tables()}
    # Staging as of its version with its quarantine as of quarantine's; the fact as before it existed (-1).
    restored = frozenset(plan.days)
    assert change.sources == {
        STG_ORDER_ITEMS: Restored(6, {QUARANTINE_ORDER_ITEMS: 4}, days=restored),
        FACT_ORDER_ITEM: Restored(-1, days=restored),
    }
    assert [change.source(t) for t in MARTS] == [Rebuilt()] * 3
    assert change.hold == Hold("rolled back to before run r1", "2025-01-02, 2025-01-03", tuple(plan.days))


def test_a_rollback_plan_says_what_it_restores_to_which_version_and_what_it_rebuilds():
    plan = RollbackPlan(day(0), day(1), {DIM_PRODUCT: 2}, [FACT_ORDER_ITEM], "rolled back to before run r7")
    assert plan.describe() == (
        f"2025-01-01..2025-01-02: restore {DIM_PRODUCT} to version 2; rebuild {FACT_ORDER_ITEM} "
        "from them (rolled back to before run r7)"
    )


# Chunks: the ranges a backfill runs.


def test_chunks_cover_a_range_exactly_once_in_order():
    assert chunks(day(0), day(69), 31) == [(day(0), day(30)), (day(31), day(61)), (day(62), day(69))]
    assert chunks(day(0), day(0), 31) == [(day(0), day(0))]
    assert chunks(day(0), day(9), 366) == [(day(0), day(9))]
    assert chunks(day(1), day(0), 31) == []


def test_the_default_chunk_is_the_configured_days_per_run_read_on_every_call():
    with environment(BACKFILL_MAX_PARTITIONS_PER_RUN="7"):
        assert chunks(day(0), day(15)) == [(day(0), day(6)), (day(7), day(13)), (day(14), day(15))]
    with environment(BACKFILL_MAX_PARTITIONS_PER_RUN="20"):
        assert chunks(day(0), day(15)) == [(day(0), day(15))]


@MANY
@given(first=st.integers(-400, 400), length=st.integers(1, 800), size=st.integers(1, 400))
def test_chunks_are_consecutive_ranges_of_the_size_each_but_the_last(first, length, size):
    start, end = day(first), day(first + length - 1)
    found = chunks(start, end, size)
    covered = [d for a, b in found for d in days(a, b)]
    assert covered == days(start, end)  # every day once, in order
    assert all(len(days(a, b)) == size for a, b in found[:-1]) and 1 <= len(days(*found[-1])) <= size


# Scattered days, written as runs of consecutive days.


def test_scattered_days_are_written_as_runs_of_consecutive_days():
    scattered = [day(5), day(0), day(1), day(2), day(5), day(9)]
    assert day_runs(scattered) == [(day(0), day(2)), (day(5), day(5)), (day(9), day(9))]
    assert day_runs([]) == []
    assert day_predicate("d", [day(0), day(1)]) == "(d >= '2025-01-01' AND d <= '2025-01-02')"
    assert day_predicate("d", [date(2025, 1, 31), date(2025, 2, 1), date(2025, 2, 3)]) == (
        "(d >= '2025-01-31' AND d <= '2025-02-01') OR (d >= '2025-02-03' AND d <= '2025-02-03')"
    )
    assert day_ranges([day(0), day(1), day(3)]) == "2025-01-01..2025-01-02, 2025-01-04"
    with pytest.raises(ValueError, match="no days"):
        day_predicate("d", [])


@MANY
@given(offsets=st.lists(st.integers(0, 365), min_size=1, max_size=60))
def test_a_day_predicate_selects_exactly_its_days_with_one_range_per_run(offsets):
    chosen = {day(n) for n in offsets}
    runs = day_runs([day(n) for n in offsets])
    assert [d for a, b in runs for d in days(a, b)] == sorted(chosen)
    # Runs apart, never adjacent.
    assert all((b2 - a1).days > 1 for (_, a1), (b2, _) in zip(runs, runs[1:], strict=False))
    predicate = day_predicate("d", [day(n) for n in offsets])
    assert predicate.count(" OR ") == len(runs) - 1
    # The same SQL over every day of the year (SQLite compares the ISO dates as Spark compares dates).
    with sqlite3.connect(":memory:") as db:
        db.execute("CREATE TABLE t (d TEXT)")
        db.executemany("INSERT INTO t VALUES (?)", [(d.isoformat(),) for d in days(day(-3), day(368))])
        assert {date.fromisoformat(r[0]) for r in db.execute(f"SELECT d FROM t WHERE {predicate}")} == chosen


# What a refused change says: the operation, that nothing was written (restored), the failing check, table and
# day with its numbers, and what to do.


def _duplicate(on: date) -> Outcome:
    return keys.unique_key(on, DayProfile(10, 9, 0, None), ["order_id=7, order_item_id=1"])


def test_a_refused_backfill_says_nothing_was_written_in_any_table_names_the_check_table_and_day_and_what_to_do():
    change = Change(Operation.BACKFILL, {STG_ORDER_ITEMS: [day(0), day(1)], FACT_ORDER_ITEM: [day(0), day(1)]})
    refused = Refused(change, {FACT_ORDER_ITEM: [_duplicate(day(1))]})
    said = str(refused)
    assert said.startswith(
        f"backfill of 2025-01-01..2025-01-02 refused, nothing written in any of {STG_ORDER_ITEMS}, "
        f"{FACT_ORDER_ITEM}: blocking checks failed in {FACT_ORDER_ITEM}: "
    )
    assert (
        f"unique_key of {FACT_ORDER_ITEM} on 2025-01-02: duplicate_rows=1, sample_duplicate_keys=order_id=7, "
        "order_item_id=1, rows=10. "
    ) in said
    assert said.endswith("then run the same days again; `check` shows what is published now.")
    assert said.endswith(Operation.BACKFILL.refusal_hint())
    assert refused.failing_days == ["2025-01-02"]


def test_a_refused_rollback_says_nothing_was_restored_and_to_roll_back_the_tables_it_is_built_from_too():
    change = Change(
        Operation.ROLLBACK,
        {DAILY_REVENUE: [day(0), day(2), day(3)]},
        {DAILY_REVENUE: Restored(5)},
        Hold("rolled back to version 5", ""),
    )
    rec = Reconcile(FACT_ORDER_ITEM, {"items": ("sum(item_count)", "count(1)")})
    mismatch = reconcile.reconciles(day(2), rec, [reconcile.Differing("items", "3", "4")], 1)
    said = str(Refused(change, {DAILY_REVENUE: [mismatch]}))
    assert said == (
        "rollback of 2025-01-01, 2025-01-03..2025-01-04 refused, nothing restored in any of "
        "daily_revenue: blocking checks failed in daily_revenue: reconciles_with_upstream of daily_revenue "
        "on 2025-01-03: mismatches=items: 3 vs 4. Roll back the tables it is built from too (--before-run "
        "RUN restores everything a run wrote)."
    )


def test_a_refusal_names_the_first_ten_failures_then_how_many_more_and_every_failing_day():
    change = Change(Operation.RESTATEMENT, {FACT_ORDER_ITEM: days(day(0), day(5))})
    failing = [_duplicate(day(n)) for n in range(6)] + [
        keys.keys_not_null(day(n), DayProfile(10, 10, 2, None), ["order_id", "order_item_id"]) for n in range(6)
    ]
    said = str(Refused(change, {FACT_ORDER_ITEM: failing}))
    assert said.startswith("restatement of 2025-01-01..2025-01-06 refused, nothing written in any of ")
    assert said.count(f" of {FACT_ORDER_ITEM} on ") == 10 and "; and 2 more. " in said
    assert f"keys_not_null of {FACT_ORDER_ITEM} on 2025-01-01: null_key_rows=2" in said
    assert Refused(change, {FACT_ORDER_ITEM: failing}).failing_days == [d.isoformat() for d in days(day(0), day(5))]


def test_a_change_refused_for_held_days_names_who_held_each_day_and_how_to_release_it():
    change = Change(Operation.RESTATEMENT, {STG_ORDER_ITEMS: [day(0), day(1)]})
    held = HeldDay(day(1), "rolled back to before run r1", "2025-01-02", datetime(2025, 1, 5, 10, 30), "r9")
    said = str(Refused(change, holds=[held]))
    assert said.startswith(
        "restatement of 2025-01-01..2025-01-02 refused, nothing written: 1 day(s) held since a "
        "rollback: 2025-01-02 held since 2025-01-05 10:30 UTC by run r9 (rolled back to before "
        "run r1"
    )
    assert said.endswith("Publish them again with `release --start D1 --end D2`, or leave them out.")


SF1_BATCH = 76_000  # the bytes a TPC-H SF1 day lands
BUDGET = 512 * 2**20


def test_a_history_whose_landing_fits_the_budget_is_one_run_and_ten_times_as_much_is_cut_into_runs_within_it():
    assert days_per_run([SF1_BATCH] * 2409, BUDGET, 3660) == 3660
    ten_times = days_per_run([10 * SF1_BATCH] * 2409, BUDGET, 3660)
    assert ten_times == BUDGET // (10 * SF1_BATCH)
    assert len(chunks(date(1992, 1, 2), date(1998, 8, 3), ten_times)) == 4


def test_a_run_is_sized_for_the_busiest_stretch_of_the_landing_not_its_average():
    quiet_then_busy = [1_000] * 300 + [100_000] * 60
    n = days_per_run(quiet_then_busy, 1_000_000, 3660)
    assert n == 10  # ten busy days fill a run wherever it falls; the quiet days alone would allow a thousand


@given(st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=200), st.integers(1, 50_000))
def test_no_run_of_the_chosen_length_reads_more_than_the_budget_unless_one_day_alone_does(sizes, budget):
    n = days_per_run(sizes, budget, 3660)
    windows = [sum(sizes[i : i + n]) for i in range(max(1, len(sizes) - n + 1))]
    assert n == 1 or max(windows) <= budget
    assert n == 3660 or n == len(sizes) or max(sum(sizes[i : i + n + 1]) for i in range(len(sizes) - n)) > budget


def test_daily_batches_give_each_day_its_batch_and_a_batch_after_a_gap_spreads_over_the_days_since_the_last():
    assert bytes_by_day({day(0): 5, day(1): 7, day(2): 9}, day(0)) == [5, 7, 9]
    assert bytes_by_day({day(0): 10, day(4): 40}, day(0)) == [10, 10, 10, 10, 10]
    assert bytes_by_day({day(-3): 6, day(1): 4}, day(0)) == [6, 2, 2]  # a batch before the first day counts as one


def test_a_bulk_batch_of_the_whole_history_then_daily_batches_keeps_runs_as_long_as_its_days_allow():
    bulk = {day(729): 730 * 1_000}  # two years landed at once, then a batch a day
    daily = {day(730 + i): 1_000 for i in range(100)}
    n = days_per_run(bytes_by_day(bulk | daily, day(0)), 100_000, 3660)
    assert n == 100  # counted as one day, the bulk batch alone would have made every run a single day


def test_a_run_never_covers_more_days_than_the_configured_most():
    assert days_per_run([10] * 100, 10**9, 31) == 31
    assert days_per_run([10**6] * 100, 10**7, 5) == 5
