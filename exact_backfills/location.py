"""A pipeline's Dagster code location: its tables and landing as assets with their checks, its jobs and sensors, one
Spark session per run process (in-process executor). Built once per pipeline and settings in a process: a process
whose environment changed (the tests') runs its jobs with the settings it has now, their engine and lake."""

from dagster import Definitions, in_process_executor

from exact_backfills import automation, code_changes
from exact_backfills.assets import all_assets_job, publish_step
from exact_backfills.daily_run import daily_run_schedule
from exact_backfills.deadlines import declared
from exact_backfills.declare import Pipeline
from exact_backfills.event_log_writes import batch_materializations
from exact_backfills.overdue import overdue_sensor
from exact_backfills.renaming import rename_job
from exact_backfills.rollback import rollback_job
from exact_backfills.vacuuming import vacuum_job, vacuum_schedule
from resources.lake import private_files
from resources.settings import Settings, settings
from resources.spark import spark_resource

_built: dict[tuple[int, Settings], Definitions] = {}


def definitions_of(pipeline: Pipeline) -> Definitions:
    """The pipeline's Definitions: what a code location loads, and what the command line runs its jobs from."""
    configured = settings()  # a SettingsError names the variable
    if (id(pipeline), configured) not in _built:
        private_files()  # the code location's and its runs' files: its user's alone
        batch_materializations()  # a range run's materializations written a batch at a time (event_log_writes.py)
        all_assets = all_assets_job(pipeline)
        restate = automation.restate_job(pipeline)
        check_code = code_changes.check_code_versions_job(pipeline)
        vacuum = vacuum_job(pipeline)
        _built[id(pipeline), configured] = Definitions(
            assets=[*automation.landing_assets(pipeline), publish_step(pipeline)],
            asset_checks=automation.landing_checks(pipeline),
            jobs=[
                all_assets,
                restate,
                automation.preview_job(pipeline),
                rollback_job(pipeline),
                check_code,
                code_changes.plan_job(pipeline),
                code_changes.promote_job(pipeline),
                vacuum,
                rename_job(pipeline),
            ],
            schedules=[daily_run_schedule(pipeline, all_assets), vacuum_schedule(pipeline, vacuum)],
            sensors=[
                automation.late_data_sensor(pipeline, restate, all_assets),
                code_changes.code_version_sensor(pipeline, check_code),
                *([overdue_sensor(pipeline)] if declared(pipeline) else []),
            ],
            # The Spark resource is configured from the settings, which are a resource too: the UI's resources page
            # shows the values runs use (resources/settings.py).
            resources={"pyspark": spark_resource(configured), "settings": configured.shown()},
            # Steps of a run share its process and so its SparkSession: a JVM per step would cost seconds each.
            executor=in_process_executor,
        )
    return _built[id(pipeline), configured]
