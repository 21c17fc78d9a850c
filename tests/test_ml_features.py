"""The ML pipeline on the same machinery as the orders pipeline: retried events collapse, a late event restates its day
and the six after it in the 7-day features and the training set and nothing else, a user's status change restates the
later days of that user, a label beyond the restatement window is an exception until a manual backfill, a code change
is planned and promoted on exactly the days it changes, and a rollback holds its days until released and ends as a
from-scratch build (tests/test_ml_stretch.py restates a fortnight of the pipeline's batches through its daemon and ends
equal to one too).

The tests share one lake: each lands the batches it restates on top of what the others left, and none needs another
to have run."""

import json
import shutil
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from dagster import RunRequest, SkipReason, build_sensor_context

from exact_backfills import landing
from exact_backfills.automation import landing_state
from exact_backfills.backfill import (
    BackfillRequest,
    observe_landing,
    run_backfill,
    run_checks,
    run_restatement,
    run_rollback,
)
from exact_backfills.checks import LATE_DATA, UP_TO_DATE
from exact_backfills.dagster_names import RELEASE_TAG, RESTATE_JOB
from exact_backfills.location import definitions_of
from exact_backfills.partitions import days
from exact_backfills.rollback import RollbackRequest, plan_rollback
from examples.ml_features.generate import generate
from examples.ml_features.pipeline import (
    DIM_USER_STATUS,
    STG_APP_EVENTS,
    STG_LABELS,
    TRAINING_SET,
    USER_DAILY_FEATURES,
)
from examples.ml_features.pipeline import pipeline as ML
from examples.ml_features.sources import APP_EVENTS, LABELS, USER_STATUS
from resources import audit, control
from resources.delta_io import read_days, read_table
from resources.lake import lake_root
from tests.support.lake import environment, from_scratch, rows, versions
from tests.support.late_batches import assert_rewrote_exactly, land_batch, latest_check_status, snapshot
from tests.support.projects import Edit, project_with, run_commands, run_in

pytestmark = pytest.mark.slow  # builds a lake and runs backfills: minutes, not seconds

START, END = date(2025, 1, 1), date(2025, 2, 9)
EVERY_TABLE = ML.every_table
REFERENCE = "examples.ml_features.pipeline:pipeline"
# The ML pipeline's sensor as its code location defines it, called as its tick calls it.
late_data_sensor = definitions_of(ML).resolve_sensor_def("late_data_sensor")


def window(day: date) -> set[date]:
    """The days whose 7-day window holds `day`."""
    return {day + timedelta(days=i) for i in range(7)}


class Lake:
    """The shared lake: the day the next batch lands (after every batch landed so far, the labels' included)."""

    def __init__(self):
        newest = max(landing.batch_name(p) for s in ML.sources for p in landing.batch_dirs(s))
        self.next_batch = date.fromisoformat(newest) + timedelta(days=1)

    def land(self, spark, rows_, source=APP_EVENTS) -> date:
        batch, self.next_batch = self.next_batch, self.next_batch + timedelta(days=1)
        land_batch(spark, rows_, batch, source)
        return batch


@pytest.fixture(scope="module")
def built(spark, lake):
    _, instance = lake
    # Labels land up to 110 days after their day: a window that holds them, so that late rows here are restated.
    with environment(RESTATEMENT_WINDOW_DAYS="200"):
        generate(spark, START, END, seed=11, rows_per_day=12)
        assert observe_landing(ML, instance).success
        # One run for the 90 days, as a from-scratch build is: the tests' chunk of 31 days would make three.
        whole = BackfillRequest(ML, ML.partitions.first_day, ML.partitions.last_day, chunk_size=366)
        assert run_backfill(whole, instance=instance, echo=lambda _: None)
        assert run_restatement(ML, instance).success  # reads every batch once: nothing to restate
        yield Lake()


def event(event_id: str, user: int, day: date, kind: str = "click", amount: Decimal | None = None) -> tuple:
    return (event_id, user, day, kind, amount, None)


def test_the_ml_pipeline_is_its_own_dagster_group_built_with_every_check_passing(built, lake):
    _, instance = lake
    graph = definitions_of(ML).resolve_asset_graph()
    groups = {graph.get(k).group_name for k in graph.materializable_asset_keys}
    assert groups == {"ml_features"}
    result, evaluations = run_checks(ML, START, END, ML.publish_order, instance=instance)
    failing = [(e.asset_key.to_user_string(), e.check_name, e.partition) for e in evaluations if not e.passed]
    assert result.success and not failing, failing
    # The user's own check of the training set is among them, day by day, with its figures.
    share = [e for e in evaluations if e.check_name == "labelled_share"]
    assert {e.partition for e in share} == {d.isoformat() for d in days(START, END)}
    assert all({"active", "labelled"} <= set(e.metadata) for e in share)


def test_a_retried_event_is_staged_once_from_its_newest_delivery_and_changes_no_feature(spark, built):
    day = START + timedelta(days=5)
    staged = read_days(spark, STG_APP_EVENTS, "event_date", [day]).orderBy("event_id").first()
    features = {t: rows(spark, t) for t in (USER_DAILY_FEATURES, TRAINING_SET)}
    batch = built.land(spark, [event(staged.event_id, staged.user_id, day, staged.event_type, staged.amount)])
    assert run_restatement(ML).success
    again = read_table(spark, STG_APP_EVENTS).where(f"event_id = '{staged.event_id}'").collect()
    assert len(again) == 1 and again[0].ingest_date == batch  # the newest delivery wins, once
    assert {t: rows(spark, t) for t in features} == features


def test_a_late_event_restates_its_day_and_the_six_after_in_the_features_and_the_training_set_and_nothing_else(
    spark, built, lake
):
    _, instance = lake
    day = START + timedelta(days=10)
    before = snapshot(spark, EVERY_TABLE, ML.day_columns)
    built.land(spark, [event("late-1", 3, day, "purchase", Decimal("42.00"))])
    # The sensor sees the batch and launches the restatement.
    tick = late_data_sensor(build_sensor_context(instance=instance, definitions=definitions_of(ML)))
    assert isinstance(tick, RunRequest) and tick.job_name == RESTATE_JOB
    found = run_restatement(ML, instance)
    assert found.success
    expected = {STG_APP_EVENTS: {day}, USER_DAILY_FEATURES: window(day), TRAINING_SET: window(day)}
    assert_rewrote_exactly(spark, before, expected, tables=list(expected), day_column=ML.day_columns)
    features = {r.feature_date: r for r in read_table(spark, USER_DAILY_FEATURES).where("user_id = 3").collect()}
    assert all(features[d].purchases_7d >= 1 for d in window(day))
    for table in (USER_DAILY_FEATURES, TRAINING_SET):
        assert {d: latest_check_status(instance, table, UP_TO_DATE, d) for d in window(day)} == dict.fromkeys(
            window(day), "SUCCEEDED"
        )


def test_a_users_status_change_restates_the_later_days_holding_that_user_and_nothing_else(spark, built):
    since = START + timedelta(days=20)
    changed_later = {r.user_id for r in read_table(spark, DIM_USER_STATUS).where(f"valid_from >= '{since}'").collect()}
    user = min({r.user_id for r in read_table(spark, USER_DAILY_FEATURES).collect()} - changed_later)
    later = {
        r.feature_date
        for r in read_table(spark, USER_DAILY_FEATURES)
        .where(f"user_id = {user} AND feature_date >= '{since}'")
        .collect()
    }
    before = snapshot(spark, EVERY_TABLE, ML.day_columns)
    at = datetime.combine(since, datetime.min.time(), tzinfo=UTC) + timedelta(hours=9)
    built.land(spark, [(user, "vip", at, None)], USER_STATUS)
    assert run_restatement(ML).success
    expected = {DIM_USER_STATUS: {since}, USER_DAILY_FEATURES: later, TRAINING_SET: later}
    assert_rewrote_exactly(spark, before, expected, tables=list(expected), day_column=ML.day_columns)
    statuses = {r.feature_date: r.status for r in read_table(spark, TRAINING_SET).where(f"user_id = {user}").collect()}
    assert all(status == "vip" for d, status in statuses.items() if d >= since)
    assert all(status != "vip" for d, status in statuses.items() if d < since)


def test_a_label_landing_beyond_the_restatement_window_is_an_exception_until_a_manual_backfill(
    spark, built, lake, monkeypatch
):
    _, instance = lake
    monkeypatch.setenv("RESTATEMENT_WINDOW_DAYS", "30")
    day = START + timedelta(days=3)
    labelled = read_days(spark, STG_LABELS, "label_date", [day]).orderBy("user_id").first()
    at = datetime.combine(built.next_batch, datetime.min.time(), tzinfo=UTC)
    before = snapshot(spark, EVERY_TABLE, ML.day_columns)
    built.land(spark, [(labelled.user_id, day, not labelled.converted, at, None)], LABELS)
    assert run_restatement(ML, instance).success
    assert_rewrote_exactly(spark, before, set(), tables=[], day_column=ML.day_columns)
    assert [(e.table, e.day) for e in control.open_exceptions(spark, ML.name)] == [(STG_LABELS, day)]
    assert latest_check_status(instance, STG_LABELS, LATE_DATA, day) == "FAILED"

    assert run_backfill(BackfillRequest(ML, day, day), instance=instance, echo=lambda _: None)
    assert control.open_exceptions(spark, ML.name) == []
    assert latest_check_status(instance, STG_LABELS, LATE_DATA, day) == "SUCCEEDED"
    flipped = read_days(spark, TRAINING_SET, "feature_date", [day]).where(f"user_id = {labelled.user_id}").first()
    assert flipped.label == (not labelled.converted)


def test_a_backfill_by_hand_of_a_day_too_old_to_restate_leaves_its_later_window_days_stale_until_the_sensor_restates(
    spark, built, lake, monkeypatch
):
    """A late event older than the restatement window is an exception until its day is backfilled by hand. The 7-day
    features of the six days after it read that day too: failing up_to_date_with_landing, pending, and restated by
    the run the sensor launches though no new batch landed."""
    _, instance = lake
    monkeypatch.setenv("RESTATEMENT_WINDOW_DAYS", "30")
    day = START + timedelta(days=4)
    later = window(day) - {day}
    built.land(spark, [event("late-old", 1, day, "purchase", Decimal("30.00"))])
    assert run_restatement(ML, instance).success
    assert (STG_APP_EVENTS, day) in [(e.table, e.day) for e in control.open_exceptions(spark, ML.name)]
    seen = landing_state(ML)  # the sensor has seen this landing: nothing new lands below
    context = build_sensor_context(instance=instance, definitions=definitions_of(ML), cursor=seen)
    assert isinstance(late_data_sensor(context), SkipReason)

    assert run_backfill(BackfillRequest(ML, day, day), instance=instance, echo=lambda _: None)
    pending = control.read_watermark(spark, ML.name).pending
    assert pending == {t: sorted(later) for t in (USER_DAILY_FEATURES, TRAINING_SET)}
    for table in (USER_DAILY_FEATURES, TRAINING_SET):
        assert {d: latest_check_status(instance, table, UP_TO_DATE, d) for d in later} == dict.fromkeys(later, "FAILED")
        assert latest_check_status(instance, table, UP_TO_DATE, day) == "SUCCEEDED"

    before = snapshot(spark, EVERY_TABLE, ML.day_columns)
    context = build_sensor_context(instance=instance, definitions=definitions_of(ML), cursor=seen)
    tick = late_data_sensor(context)
    assert isinstance(tick, RunRequest) and tick.job_name == RESTATE_JOB
    assert run_restatement(ML, instance).success
    expected = {USER_DAILY_FEATURES: later, TRAINING_SET: later}
    assert_rewrote_exactly(spark, before, expected, tables=list(expected), day_column=ML.day_columns)
    assert control.read_watermark(spark, ML.name).pending == {}
    features = {r.feature_date: r for r in read_table(spark, USER_DAILY_FEATURES).where("user_id = 1").collect()}
    assert all(features[d].purchases_7d >= 1 for d in window(day))
    for table in (USER_DAILY_FEATURES, TRAINING_SET):
        assert {d: latest_check_status(instance, table, UP_TO_DATE, d) for d in later} == dict.fromkeys(
            later, "SUCCEEDED"
        )


def test_a_day_rolled_back_rebuilds_the_six_days_its_window_reaches_and_ends_as_a_from_scratch_build_as_its_release(
    spark, built, lake, tmp_path
):
    """A late event's restatement rolled back on its one day: the 7-day features and the training set of the six days
    after are rebuilt in the same change from the restored day, so the lake is what a from-scratch build of the landing
    without the batch makes, with no further command; released, what a from-scratch build of the whole landing makes."""
    _, instance = lake
    day = START + timedelta(days=30)
    batch = built.land(spark, [event("late-2", 2, day, "purchase", Decimal("10.00"))])
    assert run_restatement(ML, instance).success
    restated = {t: rows(spark, t) for t in EVERY_TABLE}
    run_id = instance.get_runs(limit=1)[0].run_id
    plan = plan_rollback(spark, ML, RollbackRequest(day, day, before_run=run_id))
    # (quarantine_app_events: its day was written empty again, which Delta records as no commit: nothing to restore)
    assert set(plan.restore) == {STG_APP_EVENTS, USER_DAILY_FEATURES, TRAINING_SET}
    later = sorted(window(day) - {day})
    assert plan.carried == {USER_DAILY_FEATURES: later, TRAINING_SET: later}
    assert f"beyond the range, rebuild {USER_DAILY_FEATURES} on {later[0]}..{later[-1]}" in plan.describe()
    assert run_rollback(ML, plan, instance=instance, echo=lambda _: None).success
    assert [h.day for h in control.open_holds(spark, ML.name)] == [day]
    assert not read_table(spark, STG_APP_EVENTS).where("event_id = 'late-2'").count()
    rolled_back = {t: rows(spark, t) for t in EVERY_TABLE}
    with environment(RESTATEMENT_WINDOW_DAYS="200"):
        without = from_scratch(
            spark,
            tmp_path / "without",
            ML.partitions.first_day,
            ML.partitions.last_day,
            pipeline=ML,
            leave_out=(f"app_events/ingest_date={batch}",),
        )
    assert rolled_back == without
    # Held: a restatement leaves the day as it is, and the days built from it too.
    before = snapshot(spark, EVERY_TABLE, ML.day_columns)
    assert run_restatement(ML, instance).success
    assert_rewrote_exactly(spark, before, {}, tables=[], day_column=ML.day_columns)  # no commit in any table
    assert run_backfill(
        BackfillRequest(ML, day, day, tags={RELEASE_TAG: "true"}), instance=instance, echo=lambda _: None
    )
    assert control.open_holds(spark, ML.name) == []
    assert {t: rows(spark, t) for t in EVERY_TABLE} == restated


# A fix to the features: big purchases capped in the 7-day amount. It changes the days whose window holds one.
def built_from_scratch(spark, project: Path, scratch: Path) -> dict[str, list[dict]]:
    """Every published table's rows as `project`'s code builds them from scratch, over a copy of this lake's landing,
    with its command line in a process of its own: the 90 days in one run (the tests' chunk of 31 days would make
    three)."""
    shutil.copytree(Path(lake_root()) / "landing", scratch / "landing")
    one_run = ["--max-partitions-per-run", "366"]
    backfill = ["-m", "exact_backfills", "--pipeline", REFERENCE, "backfill", *one_run]
    run_in(project, *backfill, LAKE_ROOT=str(scratch), DAGSTER_HOME=str(scratch / "home"))
    with environment(LAKE_ROOT=str(scratch)):
        return {t: rows(spark, t) for t in ML.publish_order}


CAPPED = Edit(
    "examples/ml_features/transforms.py",
    'F.sum(F.coalesce("amount", F.lit(0))).alias("amount")',
    'F.sum(F.least(F.coalesce("amount", F.lit(0)), F.lit(60))).alias("amount")',
)


def test_a_code_change_is_planned_and_promoted_on_exactly_the_days_a_from_scratch_build_with_it_changes(
    spark, built, tmp_path
):
    fixed = project_with(tmp_path / "fixed", CAPPED)
    expected = built_from_scratch(spark, fixed, tmp_path / "scratch")
    published = {t: rows(spark, t) for t in ML.publish_order}
    changed = {
        t: {r[ML.day_columns[t]] for r in [*expected[t], *published[t]] if (r in expected[t]) != (r in published[t])}
        for t in ML.publish_order
    }
    assert changed[USER_DAILY_FEATURES] and changed[USER_DAILY_FEATURES] == changed[TRAINING_SET]
    assert not changed[STG_APP_EVENTS] and not changed[STG_LABELS]

    pipeline = ["--pipeline", REFERENCE]
    planned, promoted = run_commands(fixed, [*pipeline, "plan", "--json"], [*pipeline, "promote", "{plan_id}"])
    plan = json.loads(planned.out)
    assert planned.code == 0 and plan["promotable"], planned.err
    for table in ML.publish_order:
        listed = {date.fromisoformat(d) for d in plan["tables"].get(table, {}).get("changed_days", [])}
        assert listed == changed[table], table
    assert promoted.code == 0, promoted.err
    assert {t: rows(spark, t) for t in ML.publish_order} == expected
    written = audit.read(spark, ML.name).where("operation = 'promotion'")
    assert {
        r.partition for r in written.where(f"asset = '{TRAINING_SET}' AND delta_version IS NOT NULL").collect()
    } == (changed[TRAINING_SET])


# Then the features gain a column: a user's largest day's amount in the window. The training set, which selects its
# columns, comes out the same.
TOP_DAY = [
    Edit(
        "examples/ml_features/transforms.py",
        '        F.sum("amount").cast(AMOUNT).alias("amount_7d"),\n',
        '        F.sum("amount").cast(AMOUNT).alias("amount_7d"),\n'
        '        F.max("amount").cast(AMOUNT).alias("top_day_7d"),\n',
    ),
    Edit(
        "examples/ml_features/transforms.py",
        '"events_1d", "status"\n    )',
        '"events_1d", "status", "top_day_7d"\n    )',
    ),
]


def test_the_features_gaining_a_column_are_rewritten_whole_and_the_training_set_built_from_them_is_not(
    spark, built, tmp_path
):
    gained = project_with(tmp_path / "fixed", CAPPED)
    for n, edit in enumerate(TOP_DAY):
        gained = project_with(tmp_path / f"gained{n}", edit, base=gained)
    held = sorted({r["feature_date"].isoformat() for r in rows(spark, USER_DAILY_FEATURES)})
    training_version = versions(spark, TRAINING_SET)[0]
    expected = built_from_scratch(spark, gained, tmp_path / "scratch")

    pipeline = ["--pipeline", REFERENCE]
    planned, promoted = run_commands(gained, [*pipeline, "plan", "--json"], [*pipeline, "promote", "{plan_id}"])

    plan = json.loads(planned.out)
    features, training = plan["tables"][USER_DAILY_FEATURES], plan["tables"][TRAINING_SET]
    assert planned.code == 0 and plan["promotable"], planned.out + planned.err
    assert list(features["schema"]["added"]) == ["top_day_7d"] and features["unchanged_days"] == []
    assert set(held) <= set(features["changed_days"])  # every day published, an empty one too: the shape changed
    # Early cutoff: the training set is rebuilt from the new features, its rows come out the same, nothing written.
    assert training["changed_days"] == [] and training["unchanged_days"] == features["changed_days"]
    assert promoted.code == 0, promoted.err
    assert {t: rows(spark, t) for t in ML.publish_order} == expected
    assert versions(spark, TRAINING_SET)[0] == training_version
