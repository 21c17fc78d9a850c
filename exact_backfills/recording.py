"""What Dagster records of a publication, day by day: one materialization per table per day carrying that day's
figures, and each check's result on the day tied to that day's materialization, so that the check's Partitions view
colours every day (passed, failed with its numbers, or stale until its restatement).
The check results are made in the checks package (checks/results.py), tied to the materializations yielded here."""

from collections import Counter
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from datetime import date
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetKey,
    AssetMaterialization,
    Failure,
    MaterializeResult,
    Output,
)

from exact_backfills import checks
from exact_backfills.dagster_names import TABLE_DAYS_TAG
from exact_backfills.dagster_private import add_asset_metadata_by_partition
from exact_backfills.declare import Pipeline
from exact_backfills.publish import COLUMN_SCHEMA, PartlyPublished, Publication, commit_metadata

# In a step's failure metadata: the machinery refused what was asked, writing nothing (the command line exits 2).
REFUSED = "refused"


def refusal(description: str, metadata: dict[str, Any] | None = None) -> Failure:
    """A step's failure that is a refusal: one line saying what was refused and why, nothing written."""
    return Failure(description=description, metadata={**(metadata or {}), REFUSED: True})


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
        by_day = columns_on_the_newest(by_day, in_range if written in selected else set())
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
        yield from checks.check_evaluations(context.instance, checked, outcomes)
    for output_name in check_outputs:
        yield Output(None, output_name=output_name)


def selected_check_outputs(context: Any, table: str) -> list[str]:
    """The output names of the step's selected checks of `table`."""
    return [
        context.assets_def.get_output_name_for_asset_check_key(key)
        for key in context.selected_asset_check_keys
        if key.asset_key == AssetKey(table)
    ]


def columns_on_the_newest(by_day: dict[date, dict[str, Any]], in_range: AbstractSet[str]) -> dict[date, dict[str, Any]]:
    """`by_day` with the commit's columns on the day Dagster records last only: the days of the step's range (in
    their order), then the others, sorted. Dagster's UI shows an asset's columns from its newest materialization; a
    copy on every day cost a seven-year backfill of one mart 2.5 s of its recording for 2406 copies of one schema."""
    if not by_day:
        return by_day
    newest = max(by_day, key=lambda day: (day.isoformat() not in in_range, day))
    return {day: m if day == newest else _without(m, COLUMN_SCHEMA) for day, m in by_day.items()}


def _without(metadata: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if k != key}


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
        for day, metadata in sorted(columns_on_the_newest(commit_metadata(commit, days), set()).items()):
            yield AssetMaterialization(table, partition=day.isoformat(), metadata=metadata)
    for table in [t for t in partly.not_committed if t in pipeline.by_name]:  # side tables have no checks
        outcomes = [
            checks.up_to_date.partly_published(day, partly.operation.value, list(partly.commits), table)
            for day in partly.plan[table]
        ]
        yield from checks.check_evaluations(context.instance, table, outcomes)
