"""The tables as Dagster assets, derived from `tables.TABLES`: one daily-partitioned asset per table (and per side
table), with its checks, all materialized by one step that publishes the run's tables as a whole (publish.py): a
blocking check failing on any table's day writes nothing in any table."""

from datetime import date, timedelta

from dagster import (
    AssetExecutionContext,
    AssetSelection,
    AssetSpec,
    Failure,
    FreshnessPolicy,
    define_asset_job,
    multi_asset,
)
from dagster_pyspark import LazyPySparkResource

from assets_pkg import checks, liveness, recording
from assets_pkg.partitions import backfill_policy, daily_partitions, run_days
from assets_pkg.publish import (
    GraphNotPublished,
    HeldDays,
    PartlyPublished,
    Publication,
    RunInfo,
    day_ranges,
    publish,
    verify_published,
)
from assets_pkg.tables import BY_NAME, PUBLISH_ORDER, TABLES
from resources.settings import settings

# Every step that writes the lake claims this Dagster concurrency pool, whose limit dagster.yaml sets to 1: steps of
# any runs (the UI's, the sensor's, and the command line's, which Dagster enforces too) write one at a time, so two
# runs over the same days wait for each other instead of failing on Delta's conflict detection half-way.
LAKE_WRITES_POOL = "lake_writes"

PUBLISH_STEP = "publish_tables"

# On a run that publishes days held since a rollback on purpose (`release`): it releases them.
RELEASE_TAG = "exact_backfills/release"

# Set on a writing run that fails: "nothing" when it committed nothing (a blocking check, a refused batch),
# "partly" when it committed some tables (it is run again by late_data_sensor). A run killed has neither.
PUBLISHED_TAG = "exact_backfills/published"


def freshness_policy() -> FreshnessPolicy:
    """A daily pipeline publishes every table at least once a day: Dagster shows a table not published within the
    window as failing its freshness (how far each is behind its landing: `metrics`, and up_to_date_with_landing)."""
    return FreshnessPolicy.time_window(fail_window=timedelta(hours=settings().freshness_fail_window_h))


def _specs() -> list[AssetSpec]:
    specs = []
    for t in TABLES:
        specs.append(AssetSpec(t.name, deps=list(t.upstream), description=t.description, kinds={"spark", "delta"},
                               group_name="orders", freshness_policy=freshness_policy()))
        specs += [AssetSpec(s, deps=list(t.upstream), kinds={"spark", "delta"}, group_name="orders") for s in t.side_tables]
    return specs


def tables_written(selected: set[str]) -> list[str]:
    """The tables a step writes for its selected assets, in publish order. A side table and its table are the two
    halves of one build (rows accepted vs rows quarantined): selecting either writes both, so that no row is ever
    in both or in neither."""
    return [name for name in PUBLISH_ORDER if {name, *BY_NAME[name].side_tables} & selected]


def _check_outputs(context, table: str, done: set[str]) -> list[str]:
    outputs = [o for o in recording.selected_check_outputs(context, table) if o not in done]
    done.update(outputs)
    return outputs


def failed_publication(context, error: Exception):
    """What Dagster records of a publication that failed, then the step's Failure: the failing check results when
    nothing was written; the materializations of what was committed, and the days left behind, when part was. The
    run is tagged with what it published, which tells late_data_sensor whether to run it again."""
    if isinstance(error, PartlyPublished):
        context.instance.add_run_tags(context.run_id, {PUBLISHED_TAG: "partly"})
        yield from recording.partly_published_events(context, error)
        raise Failure(description=str(error), metadata={
            "committed": ", ".join(error.commits), "not_committed": ", ".join(error.not_committed)}) from error.cause
    context.instance.add_run_tags(context.run_id, {PUBLISHED_TAG: "nothing"})  # publish raises nothing else later
    if isinstance(error, GraphNotPublished):
        for table, failing in error.failing.items():
            yield from recording.publication_events(context, table, _checked(error.plan[table], failing))
        raise Failure(description=str(error), metadata={"failing_days": ", ".join(error.failing_days)}) from None
    if isinstance(error, HeldDays):
        raise Failure(description=str(error), metadata={"held_days": ", ".join(str(h.day) for h in error.holds)}) from None
    raise error


# can_subset lets the UI materialize any tables (and checks) of the graph; per-check outputs are optional, since
# results are recorded per day, not returned.
@multi_asset(
    name=PUBLISH_STEP,
    specs=_specs(),
    check_specs=[spec for t in TABLES for spec in checks.check_specs(t.name, t.checks)],
    partitions_def=daily_partitions,
    backfill_policy=backfill_policy,
    can_subset=True,
    pool=LAKE_WRITES_POOL,
)
def publish_tables(context: AssetExecutionContext, pyspark: LazyPySparkResource):
    liveness.record(context)
    spark = pyspark.spark_session
    days = run_days(context)
    run = RunInfo.of(context.run)
    selected = {k.to_user_string() for k in context.selected_asset_keys}
    writes = tables_written(selected)
    checked = {k.asset_key.to_user_string() for k in context.selected_asset_check_keys}
    done: set[str] = set()
    for table in [t for t in PUBLISH_ORDER if t in checked and t not in writes]:
        # Only checks selected (the UI's "Execute" on a check, or the `check` command): verify what is published.
        outcomes = verify_published(spark, table, days, run)
        yield from recording.publication_events(context, table, _checked(days, outcomes), check_outputs=_check_outputs(context, table, done))
    if not writes:
        return
    try:
        publications = publish(spark, {t: days for t in writes}, run,
                               held="release" if context.run.tags.get(RELEASE_TAG) == "true" else "refuse")
    except Exception as error:
        yield from failed_publication(context, error)
    for table in writes:
        yield from recording.publication_events(context, table, publications[table], selected, _check_outputs(context, table, done))
        for written, totals in publications[table].totals.items():
            context.log.info(f"{written}: {len(days)} day(s) {day_ranges(days)} written: {totals}")


def _checked(days: list[date], outcomes: list[checks.Outcome]) -> Publication:
    """Check results with nothing written."""
    return Publication(days, outcomes, {})


pipeline_assets = [publish_tables]

ALL_ASSETS_JOB = "all_assets"
all_assets_job = define_asset_job(ALL_ASSETS_JOB, selection=AssetSelection.all())
