"""The rollback horizon: a rollback to a version whose files the vacuum may have removed (the commit that replaced it
older than ROLLBACK_HORIZON_DAYS) is refused in one line before anything is written, one within it is planned; the
vacuum sets every table's retention to the horizon and removes nothing younger."""

import os
import time
from collections import Counter
from datetime import date, timedelta

import pytest

from exact_backfills import clock
from exact_backfills.backfill import run_vacuum
from exact_backfills.dagster_names import ALL_ASSETS_JOB, VACUUM_OP
from exact_backfills.landing import land_batch
from exact_backfills.location import definitions_of
from exact_backfills.rollback import RollbackRequest, plan_rollback
from resources import audit
from resources.delta_io import delta_path, history
from resources.lake import control_path, table_path
from tests.support import visits
from tests.support.lake import environment

pytestmark = pytest.mark.slow
DAY = date(2025, 1, 2)


def _versions_of_a_day_written_three_times(spark, instance) -> list[int]:
    job = definitions_of(visits.pipeline).resolve_job_def(ALL_ASSETS_JOB)
    for n in range(3):  # each batch adds a visit: each run commits a new version
        row = (f"r{n}", DAY, clock.now())
        land_batch(visits.VISITS, spark.createDataFrame([row], visits.VISITS.schema), DAY + timedelta(days=n))
        assert job.execute_in_process(instance=instance, partition_key=DAY.isoformat()).success
    return sorted(h.version for h in history(spark, table_path("stg_visits")))


def _backdate_commits_before(table: str, version: int, days: int) -> None:
    """The commits before `version` made `days` ago, as Delta reads a commit's time (its log entry's file time)."""
    log = table_path(table) + "/_delta_log"
    then = time.time() - days * 86400
    for name in os.listdir(log):
        if name.endswith(".json") and int(name.split(".")[0]) < version:
            os.utime(os.path.join(log, name), (then, then))


def test_a_rollback_past_the_horizon_is_refused_in_one_line_and_one_within_it_is_planned(spark, lake):
    _, instance = lake
    versions = _versions_of_a_day_written_three_times(spark, instance)
    latest = versions[-1]
    _backdate_commits_before("stg_visits", latest, days=40)  # every commit but the latest 40 days old
    asked = RollbackRequest(DAY, DAY, table="stg_visits", version=latest - 1)
    assert plan_rollback(spark, visits.pipeline, asked).restore == {"stg_visits": latest - 1}  # replaced just now
    with pytest.raises(ValueError) as refused:
        plan_rollback(spark, visits.pipeline, RollbackRequest(DAY, DAY, table="stg_visits", version=latest - 2))
    said = str(refused.value)
    assert "\n" not in said
    assert said.startswith(f"stg_visits version {latest - 2} was replaced on ")
    assert said.endswith(
        ", beyond the rollback horizon of 30 days (ROLLBACK_HORIZON_DAYS): its files may be vacuumed; rebuild the "
        "days from the landing instead (backfill)"
    )
    oldest = RollbackRequest(DAY, DAY, table="stg_visits", version=0)
    with environment(ROLLBACK_HORIZON_DAYS="60"):  # a longer horizon reaches it once the table keeps files as long
        with pytest.raises(ValueError, match=r"beyond stg_visits's own retention of 30 days \(`vacuum` sets it"):
            plan_rollback(spark, visits.pipeline, oldest)
        assert run_vacuum(visits.pipeline, instance).success
        assert plan_rollback(spark, visits.pipeline, oldest).restore == {"stg_visits": 0}


def test_the_vacuum_sets_every_tables_retention_to_the_horizon_and_keeps_what_is_younger(spark, lake):
    _, instance = lake
    if not os.path.isdir(table_path("stg_visits")):
        _versions_of_a_day_written_three_times(spark, instance)
    rows_before = spark.read.format("delta").load(table_path("stg_visits")).count()
    trail_path = control_path(visits.pipeline.name, audit.AUDIT_TABLE)
    trail = delta_path(trail_path)
    trail_rows = spark.sql(f"SELECT * FROM {trail}").count()
    # A trail made before its files recorded their days, and one made with Delta's auto compaction: a file per table
    # per run.
    spark.sql(f"ALTER TABLE {trail} UNSET TBLPROPERTIES ({', '.join(repr(k) for k in audit.TRAIL_PROPERTIES)})")
    spark.sql(f"ALTER TABLE {trail} SET TBLPROPERTIES ('{audit.AUTO_COMPACT}' = 'true')")
    by_table = Counter(os.path.dirname(f) for f in spark.read.format("delta").load(trail_path).inputFiles())
    small = sum(n for n in by_table.values() if n > 1)  # what OPTIMIZE merges: a table's files, when it has several
    with environment(ROLLBACK_HORIZON_DAYS="45"):
        first = run_vacuum(visits.pipeline, instance)
        again = run_vacuum(visits.pipeline, instance)
    assert first.success and again.success
    said = sorted(first.output_for_node(VACUUM_OP))
    assert said[1:] == [
        "quarantine_visits: retention set to interval 45 days; 0 file(s) older than the horizon removed",
        "stg_visits: retention set to interval 45 days; 0 file(s) older than the horizon removed",
    ]
    assert said[0] == (
        f"backfill_audit: its files' day statistics set; compaction after every append turned off; {small} small "
        "file(s) merged; "
        "retention set to interval 45 days; 0 file(s) older than the horizon removed"
    )
    assert sorted(again.output_for_node(VACUUM_OP)) == [
        "backfill_audit: 0 small file(s) merged; 0 file(s) older than the horizon removed",
        "quarantine_visits: 0 file(s) older than the horizon removed",
        "stg_visits: 0 file(s) older than the horizon removed",
    ]
    properties = spark.sql(f"DESCRIBE DETAIL {trail}").first().properties
    assert {k: properties.get(k) for k in audit.TRAIL_PROPERTIES} == audit.TRAIL_PROPERTIES
    assert audit.AUTO_COMPACT not in properties
    assert spark.sql(f"SELECT * FROM {trail}").count() == trail_rows
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{table_path('stg_visits')}`").collect()[0]["properties"]
    assert detail["delta.logRetentionDuration"] == detail["delta.deletedFileRetentionDuration"] == "interval 45 days"
    assert spark.read.format("delta").load(table_path("stg_visits")).count() == rows_before
