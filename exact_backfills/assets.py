"""A pipeline's tables as Dagster assets, derived from its declaration: one daily-partitioned asset per table (and per
side table) in the pipeline's group, with its checks, all materialized by one step that publishes the run's tables as
a whole (publish.py): a blocking check failing on any table's day writes nothing in any table."""

from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from datetime import date, timedelta
from typing import Any, NoReturn

from dagster import (
    AssetCheckSpec,
    AssetExecutionContext,
    AssetsDefinition,
    AssetSelection,
    AssetSpec,
    DailyPartitionsDefinition,
    Failure,
    FreshnessPolicy,
    define_asset_job,
    multi_asset,
)
from dagster_pyspark import LazyPySparkResource
from pyspark.sql import SparkSession

from exact_backfills import checks, code_versions, deadlines, landing, liveness, recording
from exact_backfills.dagster_names import (
    ALL_ASSETS_JOB,
    LAKE_WRITES_POOL,
    LEFT_STALE_TAG,
    PIPELINE_TAG,
    PUBLISH_STEP,
    PUBLISHED_NOTHING,
    PUBLISHED_PARTLY,
    PUBLISHED_TAG,
)
from exact_backfills.dagster_private import UnresolvedAssetJobDefinition
from exact_backfills.declare import Declared, Pipeline
from exact_backfills.partitions import backfill_policy, run_days
from exact_backfills.publish import (
    Change,
    Operation,
    PartlyPublished,
    Publication,
    Refused,
    RunInfo,
    carried_days,
    carried_through,
    day_ranges,
    operation_of,
    publishing,
    with_carried,
)
from exact_backfills.verification import published_state, verify_published
from resources.settings import settings
from resources.spark import session_of


def freshness_policy() -> FreshnessPolicy:
    """A daily pipeline publishes every table at least once a day: Dagster shows a table not published within the
    window as failing its freshness (how far each is behind its landing: `metrics`, and up_to_date_with_landing)."""
    return FreshnessPolicy.time_window(fail_window=timedelta(hours=settings().freshness_fail_window_h))


def day_dependencies(table: Declared) -> dict[str, str]:
    """Each upstream table's days that a day D reads ("reads <upstream>": "D-6..D"), shown on the asset's page.
    Metadata, not Dagster partition mappings on the dependencies: Dagster's asset backfill runs a table in the same
    run as its upstream only through a day-to-day mapping, so a window's mapping would split each chunk of a UI range
    backfill into one run per level of the graph (tests/test_day_mappings.py measures it)."""
    return {f"reads {upstream}": dependency.reads() for upstream, dependency in table.upstream.items()}


def _specs(pipeline: Pipeline) -> list[AssetSpec]:
    specs = []
    versions = code_versions.current(pipeline)
    for t in pipeline.tables:
        deps = pipeline.upstream_assets(t.name)
        specs.append(
            AssetSpec(
                t.name,
                deps=deps,
                description=t.description,
                metadata=day_dependencies(t),
                kinds={"spark", "delta"},
                group_name=pipeline.name,
                freshness_policy=freshness_policy(),
                code_version=versions[t.name],  # derived from its code (code_versions.py)
            )
        )
        specs += [
            AssetSpec(
                s.name,
                deps=deps,
                description=f"The rows of {t.name}'s source that break its contract, with the reason: written with "
                f"{t.name}, by the same build.",
                kinds={"spark", "delta"},
                group_name=pipeline.name,
                code_version=versions[s.name],
            )
            for s in t.side_tables
        ]
    return specs


def tables_written(pipeline: Pipeline, selected: set[str]) -> list[str]:
    """The tables a step writes for its selected assets, in publish order. A side table and its table are the two
    halves of one build (rows accepted vs rows quarantined): selecting either writes both, so that no row is ever
    in both or in neither."""
    return [
        name
        for name in pipeline.publish_order
        if {name, *(s.name for s in pipeline.by_name[name].side_tables)} & selected
    ]


def _check_outputs(context: AssetExecutionContext, table: str, done: set[str]) -> list[str]:
    outputs = [o for o in recording.selected_check_outputs(context, table) if o not in done]
    done.update(outputs)
    return outputs


def failed_publication(
    context: Any, pipeline: Pipeline, error: Exception, recorded: AbstractSet[str] = frozenset()
) -> Iterator[Any]:
    """What Dagster records of a change that failed, then the step's Failure: the failing check results when nothing
    was written; the materializations of what was committed (but not `recorded` already), and the days left behind,
    when part was. The run is tagged with what it published, which tells late_data_sensor whether to run it again."""
    if isinstance(error, PartlyPublished):
        context.instance.add_run_tags(context.run_id, {PUBLISHED_TAG: PUBLISHED_PARTLY})
        yield from recording.partly_published_events(context, pipeline, error, recorded)
        raise Failure(
            description=str(error),
            metadata={"committed": ", ".join(error.commits), "not_committed": ", ".join(error.not_committed)},
        ) from error.cause
    # Anything else publish raises came before its first commit.
    context.instance.add_run_tags(context.run_id, {PUBLISHED_TAG: PUBLISHED_NOTHING})
    if not isinstance(error, Refused):
        raise error
    for table, failing in error.failing.items():
        yield from recording.publication_events(context, table, _checked(error.change.days[table], failing))
    _refusal(error)


def _refusal(error: Refused) -> NoReturn:
    metadata = (
        {"held_days": ", ".join(str(h.day) for h in error.holds)}
        if error.holds
        else {"failing_days": ", ".join(error.failing_days)}
    )
    raise recording.refusal(str(error), metadata) from None


def _check_specs(pipeline: Pipeline, partitions: DailyPartitionsDefinition) -> list[AssetCheckSpec]:
    """Every table's checks (the deadline's where the calendar declares one), and each quarantine's."""
    deadline = deadlines.declared(pipeline)
    tables = [spec for t in pipeline.tables for spec in checks.check_specs(t, partitions, deadline)]
    sides = [
        s for t in pipeline.tables for side in t.side_tables for s in checks.quarantine_check_specs(side, partitions)
    ]
    return tables + sides


def publish_step(pipeline: Pipeline) -> AssetsDefinition:
    """The one step that materializes any of the pipeline's tables (and runs any of their checks)."""
    partitions = pipeline.partitions.definition

    # can_subset lets the UI materialize any tables (and checks) of the graph; per-check outputs are optional, since
    # results are recorded per day, not returned.
    @multi_asset(
        name=PUBLISH_STEP,
        specs=_specs(pipeline),
        check_specs=_check_specs(pipeline, partitions),
        partitions_def=partitions,
        backfill_policy=backfill_policy(landing.days_per_backfill_run(pipeline)),
        can_subset=True,
        pool=LAKE_WRITES_POOL,
    )
    def publish_tables(context: AssetExecutionContext, pyspark: LazyPySparkResource) -> Iterator[Any]:
        liveness.record(context, pipeline)
        spark = session_of(pyspark)
        days = run_days(context)
        run = RunInfo.of(context.run)
        selected = {k.to_user_string() for k in context.selected_asset_keys}
        writes = tables_written(pipeline, selected)
        checked = {k.asset_key.to_user_string() for k in context.selected_asset_check_keys}
        done: set[str] = set()
        writing = set(pipeline.with_side_tables(writes))
        only_checked = [t for t in pipeline.every_table if t in checked and t not in writing]
        if only_checked:
            yield from _checks_only(context, spark, pipeline, only_checked, done)
        if not writes:
            return
        # Each table's days are recorded in Dagster while the next table is committed (publishing).
        publications = publishing(spark, pipeline, _change_of(context, spark, pipeline, writes), run)
        recorded: set[str] = set()
        while True:
            try:
                table, publication = next(publications)
            except StopIteration:
                break
            except Exception as error:
                yield from failed_publication(context, pipeline, error, recorded)
            sides = [s.name for s in pipeline.by_name[table].side_tables]
            outputs = [o for t in [*sides, table] for o in _check_outputs(context, t, done)]
            yield from recording.publication_events(context, table, publication, selected, outputs)
            recorded |= set(publication.metadata)
            for written, totals in publication.totals.items():
                context.log.info(f"{written}: {len(days)} day(s) {day_ranges(days)} written: {totals}")
            if publication.left_stale:
                _record_left_stale(context, table, publication.left_stale)

    return publish_tables


def _checks_only(
    context: AssetExecutionContext, spark: SparkSession, pipeline: Pipeline, tables: list[str], done: set[str]
) -> Iterator[Any]:
    """Only checks selected of `tables` (the UI's "Execute" on a check, or the `check` command): each verifies what is
    published, the late-data detection and the code's staleness found once for them all."""
    days, run = run_days(context), RunInfo.of(context.run)
    state = published_state(spark, pipeline, tables)
    for table in tables:
        wanted = {k.name for k in context.selected_asset_check_keys if k.asset_key.to_user_string() == table}
        outcomes = [o for o in verify_published(spark, pipeline, table, days, run, state) if o.check in wanted]
        yield from recording.publication_events(
            context, table, _checked(days, outcomes), check_outputs=_check_outputs(context, table, done)
        )


def _change_of(context: AssetExecutionContext, spark: SparkSession, pipeline: Pipeline, writes: list[str]) -> Change:
    """What a run of the assets changes: its tables' days; a release also the days built from them beyond."""
    days = run_days(context)
    change = Change(operation_of(context.run), {t: days for t in writes})
    if change.operation is not Operation.RELEASE:
        return change
    carried = carried_through(spark, pipeline, change.days, change.days)
    if carried:
        context.log.info(f"release: beyond its days, also rebuilds {carried_days(carried)}")
    return with_carried(change, carried)


def _record_left_stale(context: AssetExecutionContext, table: str, left_stale: dict[str, list[date]]) -> None:
    """The days built from `table`'s changed days that the run does not write: failing up_to_date_with_landing until
    the restatement late_data_sensor launches (the run's tag tells it) rewrites them."""
    context.instance.add_run_tags(context.run.run_id, {LEFT_STALE_TAG: "true"})
    for stale, days in left_stale.items():
        context.log.warning(
            f"{stale}: {len(days)} day(s) {day_ranges(days)} {checks.up_to_date.left_behind_why(table)}"
        )
        outcomes = [checks.up_to_date.left_behind(d, table) for d in days]
        for evaluation in checks.check_evaluations(context.instance, stale, outcomes):
            context.log_event(evaluation)


def _checked(days: list[date], outcomes: list[checks.Outcome]) -> Publication:
    """Check results with nothing written."""
    return Publication(days, outcomes, {})


def all_assets_job(pipeline: Pipeline) -> UnresolvedAssetJobDefinition:
    """Every table of the pipeline: what a command-line backfill runs, chunk by chunk."""
    return define_asset_job(ALL_ASSETS_JOB, selection=AssetSelection.all(), tags={PIPELINE_TAG: pipeline.name})
