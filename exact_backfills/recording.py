"""What Dagster records of a publication, day by day: one materialization per table per day carrying that day's
figures, and each check's result on the day tied to that day's materialization, so that the check's Partitions view
colours every day (passed, failed with its numbers, or stale until its restatement).

Dagster ties an `AssetCheckResult` to a materialization only in a single-partition step; a range run records it with
no partition at all. So results are recorded as `AssetCheckEvaluation`s naming their day and the storage id of the
day's latest materialization, which is what the UI compares to decide whether a day's result is current."""

from collections import Counter
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from datetime import date
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetKey,
    AssetMaterialization,
    AssetRecordsFilter,
    DagsterInstance,
    Failure,
    MaterializeResult,
    Output,
)

from exact_backfills import checks
from exact_backfills.dagster_names import TABLE_DAYS_TAG
from exact_backfills.dagster_private import AssetCheckEvaluationTargetMaterializationData as CheckedMaterialization
from exact_backfills.dagster_private import add_asset_metadata_by_partition
from exact_backfills.declare import Pipeline
from exact_backfills.publish import PartlyPublished, Publication, commit_metadata

# In a step's failure metadata: the machinery refused what was asked, writing nothing (the command line exits 2).
REFUSED = "refused"


def refusal(description: str, metadata: dict[str, Any] | None = None) -> Failure:
    """A step's failure that is a refusal: one line saying what was refused and why, nothing written."""
    return Failure(description=description, metadata={**(metadata or {}), REFUSED: True})


def latest_materializations(
    instance: DagsterInstance, table: str, days: Iterable[date]
) -> dict[str, CheckedMaterialization]:
    """Each day's latest materialization of `table` (days never materialized are absent)."""
    wanted = sorted({d.isoformat() for d in days})
    found: dict[str, CheckedMaterialization] = {}
    cursor = None
    while wanted and len(found) < len(wanted):
        page = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey(table), asset_partitions=wanted), limit=1000, cursor=cursor
        )
        for record in page.records:  # newest first: the first one seen of a day is its latest
            if record.partition_key is not None and record.partition_key not in found:
                found[record.partition_key] = CheckedMaterialization(
                    storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp
                )
        if not page.has_more:
            break
        cursor = page.cursor
    return found


def check_evaluations(
    instance: DagsterInstance, table: str, outcomes: list[checks.Outcome]
) -> list[AssetCheckEvaluation]:
    """The outcomes as Dagster check results, each on its day and tied to the day's latest materialization: the one
    just written, or, for a result that stopped a write or found a day stale, the one still published."""
    targets = latest_materializations(instance, table, {o.day for o in outcomes})
    return [
        AssetCheckEvaluation(
            asset_key=AssetKey(table),
            check_name=o.check,
            passed=o.passed,
            partition=o.day.isoformat(),
            target_materialization_data=targets.get(o.day.isoformat()),
            severity=o.severity,
            blocking=o.blocking,
            # The run log shows the check, the asset and this line, so it names the day.
            description=f"{o.day}: "
            + (checks.summary(o) or o.metadata.get("why") or ("passed" if o.passed else "failed")),
            metadata={"day": o.day.isoformat(), **o.metadata},
        )
        for o in outcomes
    ]


_published: Counter[str] = Counter()  # run id -> table-days its publications have materialized in this process


def publication_events(
    context: Any,
    table: str,
    publication: Publication,
    selected: AbstractSet[str] = frozenset(),
    check_outputs: Iterable[str] = (),
) -> Iterator[AssetMaterialization | MaterializeResult | AssetCheckEvaluation | Output]:
    """Yield, in this order: every table's materialization of every day written, then the check results tied to
    them, then an empty output for each of the step's selected check outputs (what Dagster itself yields for a check
    result; without it the run log reports the checks' outputs as missing).

    A table the step materializes (`selected`) gets Dagster's own materializations, one per day of the range, each
    with the day's figures added as partition-scoped metadata (every day's at once: dagster_private.py); any other
    table written (a side table not selected, or every table of a restatement) gets an AssetMaterialization per day.
    The results are made after those have been yielded: Dagster stores a yielded event before the generator resumes,
    so the days' new materializations are their latest when the results look them up."""
    if publication.metadata:
        _published[context.run.run_id] += sum(len(by_day) for by_day in publication.metadata.values())
        context.instance.add_run_tags(context.run.run_id, {TABLE_DAYS_TAG: str(_published[context.run.run_id])})
    in_range = set(context.partition_keys) if selected else set()
    for written, by_day in publication.metadata.items():
        beyond = by_day
        if written in selected:
            by_partition = {day.isoformat(): m for day, m in by_day.items() if day.isoformat() in in_range}
            add_asset_metadata_by_partition(context, AssetKey(written), by_partition)
            yield MaterializeResult(asset_key=written)
            beyond = {day: m for day, m in by_day.items() if day.isoformat() not in in_range}
        # Not the step's materialization: another table written (a side table not selected, every table of a
        # restatement), or days beyond the run's range (a release rebuilds those built from its days).
        for day, metadata in sorted(beyond.items()):
            yield AssetMaterialization(written, partition=day.isoformat(), metadata=metadata)
    for checked, outcomes in [*publication.side_outcomes.items(), (table, publication.outcomes)]:
        if len(publication.days) > checks.events_max_days():  # every day's figures stay in backfill_audit
            outcomes = [o for o in outcomes if not o.passed]
        yield from check_evaluations(context.instance, checked, outcomes)
    for output_name in check_outputs:
        yield Output(None, output_name=output_name)


def selected_check_outputs(context: Any, table: str) -> list[str]:
    """The output names of the step's selected checks of `table`."""
    return [
        context.assets_def.get_output_name_for_asset_check_key(key)
        for key in context.selected_asset_check_keys
        if key.asset_key == AssetKey(table)
    ]


def partly_published_events(
    context: Any, pipeline: Pipeline, partly: PartlyPublished, recorded: AbstractSet[str] = frozenset()
) -> Iterator[AssetMaterialization | AssetCheckEvaluation]:
    """A run that failed after committing some tables: a materialization of each day of each table committed (it
    holds this run's rows) unless its publication was `recorded` already, then, on each table not committed, a
    failing up_to_date_with_landing result on each day, so that the UI shows those days as behind until the days are
    run again."""
    for table, commit in partly.commits.items():
        if table in recorded:
            continue
        days = partly.plan[table]
        for day, metadata in sorted(commit_metadata(commit, days).items()):
            yield AssetMaterialization(table, partition=day.isoformat(), metadata=metadata)
    committed = ", ".join(partly.commits)
    for table in [t for t in partly.not_committed if t in pipeline.by_name]:  # side tables have no checks
        outcomes = [
            checks.Outcome(
                checks.UP_TO_DATE,
                day,
                False,
                {
                    "stale": True,
                    "why": f"the {partly.operation.value} failed after committing {committed}, not {table}: "
                    "run these days again",
                },
            )
            for day in partly.plan[table]
        ]
        yield from check_evaluations(context.instance, table, outcomes)
