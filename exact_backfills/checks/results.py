"""The checks as Dagster sees them: their specs, and their results, made here alone.

Dagster ties an `AssetCheckResult` to a materialization only in a single-partition step; a range run records it with
no partition at all. So results are recorded as `AssetCheckEvaluation`s naming their day and the storage id of the
day's latest materialization, which is what the UI compares to decide whether a day's result is current."""

from collections.abc import Iterable, Sequence
from datetime import date

from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    AssetRecordsFilter,
    DagsterInstance,
    DailyPartitionsDefinition,
)

from exact_backfills.checks import quarantined
from exact_backfills.checks.base import Outcome, summary
from exact_backfills.checks.catalog import checks_of
from exact_backfills.dagster_private import AssetCheckEvaluationTargetMaterializationData as CheckedMaterialization
from exact_backfills.declare import Declared, SideTable
from resources.settings import settings


def events_max_days() -> int:
    """Above this many days in one run, only the failing check results are logged day by day: Dagster stores each
    event one by one, which a run over years of days would spend most of its time on. Every day's numbers stay in
    backfill_audit, and the `check` command re-evaluates any range."""
    return settings().check_events_max_days


def check_specs(
    table: Declared, partitions: DailyPartitionsDefinition, deadline_declared: bool = False
) -> list[AssetCheckSpec]:
    # The blocking checks run on the staged rows before the write: a failing day stops it, the step fails, and
    # nothing downstream runs. Declared blocking so that Dagster shows them so (and would gate on them too).
    return [
        AssetCheckSpec(
            c.name, asset=table.name, partitions_def=partitions, description=c.description, blocking=c.blocking
        )
        for c in checks_of(table, deadline_declared)
    ]


def quarantine_check_specs(side: SideTable, partitions: DailyPartitionsDefinition) -> list[AssetCheckSpec]:
    """A quarantine side table's check: what it holds each day, by reason, and the refused files."""
    check = quarantined.HELD_APART
    return [AssetCheckSpec(check.name, asset=side.name, partitions_def=partitions, description=check.description)]


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


def check_evaluations(instance: DagsterInstance, table: str, outcomes: list[Outcome]) -> list[AssetCheckEvaluation]:
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
            description=f"{o.day}: " + (summary(o) or o.metadata.get("why") or ("passed" if o.passed else "failed")),
            metadata={"day": o.day.isoformat(), **o.metadata},
        )
        for o in outcomes
    ]


def landing_contract_result(refused: Sequence[str]) -> AssetCheckResult:
    """A source's landing contract: every landed file meets it, or the refused ones (`refused`: each described)."""
    return AssetCheckResult(
        passed=not refused,
        severity=AssetCheckSeverity.ERROR,
        description=f"{len(refused)} file(s) refused" if refused else "every landed file meets the contract",
        metadata={"refused_files": len(refused), "refused": "\n".join(refused[:50])},
    )
