"""The code location: every asset, one Spark session per run process (in-process executor), one job for all assets."""

from dagster import AssetSelection, Definitions, define_asset_job, in_process_executor

from assets_pkg.assets import pipeline_assets
from assets_pkg.automation import landing_assets, late_data_sensor, preview_late_data_job, restate_late_data_job
from resources.spark import spark_resource

ALL_ASSETS_JOB = "all_assets"

all_assets_job = define_asset_job(ALL_ASSETS_JOB, selection=AssetSelection.all())

defs = Definitions(
    assets=[*landing_assets, *pipeline_assets],
    jobs=[all_assets_job, restate_late_data_job, preview_late_data_job],
    sensors=[late_data_sensor],
    resources={"pyspark": spark_resource()},
    # Steps of a run share its process and so its SparkSession: a JVM per step would cost ~5 s each.
    executor=in_process_executor,
)
