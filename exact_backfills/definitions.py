"""The code location: every asset, one Spark session per run process (in-process executor), one job for all assets."""

from dagster import Definitions, in_process_executor

from exact_backfills.assets import all_assets_job, pipeline_assets
from exact_backfills.automation import (
    landing_assets,
    landing_checks,
    late_data_sensor,
    preview_late_data_job,
    restate_late_data_job,
)
from exact_backfills.code_changes import (
    check_code_versions_job,
    code_version_sensor,
    plan_code_change_job,
    promote_plan_job,
)
from exact_backfills.dagster_private import batch_materializations
from exact_backfills.rollback import rollback_job
from resources.settings import settings
from resources.spark import spark_resource

__all__ = ["defs"]

configured = settings()  # validated once: a SettingsError names the variable
batch_materializations()  # a range run's materializations written a batch at a time (dagster_private.py)

defs = Definitions(
    assets=[*landing_assets, *pipeline_assets],
    asset_checks=landing_checks,
    jobs=[
        all_assets_job,
        restate_late_data_job,
        preview_late_data_job,
        rollback_job,
        check_code_versions_job,
        plan_code_change_job,
        promote_plan_job,
    ],
    sensors=[late_data_sensor, code_version_sensor],
    # The Spark resource is configured from the settings, which are a resource too: the UI's resources page shows the
    # values runs use (resources/settings.py).
    resources={"pyspark": spark_resource(configured), "settings": configured},
    # Steps of a run share its process and so its SparkSession: a JVM per step would cost seconds each.
    executor=in_process_executor,
)
