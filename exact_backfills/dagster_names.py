"""The names the project gives Dagster things, in one place: jobs, steps, the pool, and the run tags it reads back.
(The names Dagster itself defines with no public constant are in dagster_private.py.)"""

import functools

# Jobs and their steps.
ALL_ASSETS_JOB = "all_assets"
PUBLISH_STEP = "publish_tables"  # the one step that writes every table of a run (assets.py)
RESTATE_JOB = "restate_late_data"
RESTATE_OP = "restate_stale_days"
PREVIEW_JOB = "preview_late_data"
ROLLBACK_JOB = "rollback_days"
ROLLBACK_OP = "roll_back_days"
CODE_CHECK_JOB = "check_code_versions"
CODE_CHECK_OP = "check_built_by_current_code"
PLAN_JOB = "plan_code_change"
PLAN_OP = "build_plan"
PROMOTE_JOB = "promote_plan"
PROMOTE_OP = "promote_changed_days"
DAILY_RUN_SCHEDULE = "daily_run"  # publishes each day once it closes (daily_run.py)
VACUUM_JOB = "vacuum_tables"
VACUUM_OP = "vacuum_under_the_horizon"
VACUUM_SCHEDULE = "nightly_vacuum"
RENAME_JOB = "rename_tables"
RENAME_OP = "move_renamed_days"

# Every step that writes the lake claims this concurrency pool, whose limit dagster.yaml sets to 1: steps of any runs
# (the UI's, the sensor's, the command line's) write one at a time, so two runs over the same days wait for each
# other instead of failing on Delta's conflict detection half-way.
LAKE_WRITES_POOL = "lake_writes"

# Run tags.
CLI_BACKFILL_TAG = "exact_backfills/backfill"  # a command-line backfill's id, on each of its runs
RELEASE_TAG = "exact_backfills/release"  # "true": the run publishes days held since a rollback, and releases them
WITHDRAWN_TAG = "exact_backfills/withdrawn"  # on the runs that publish again the days of a withdrawn file
LANDING_STATE_TAG = "exact_backfills/landing_state"  # on a restatement run: the landing it started from
REPAIR_OF_TAG = "exact_backfills/repair_of"  # on a run launched to repair a failed one: the failed run's id
PIPELINE_TAG = "exact_backfills/pipeline"  # the pipeline a run works on: on its job, or added when its step starts
PROCESS_TAG = "exact_backfills/process"  # host:pid:start time of the process executing the run
PROFILE_TAG = "exact_backfills/profile"  # where the run ran (Settings.profile): costs are fitted per profile
# The table-days a run has published so far (its materializations), which costs are fitted on: read with the run's
# record, where counting its materializations opens the run's own event log.
TABLE_DAYS_TAG = "exact_backfills/table_days"
# Set on a writing run that fails: PUBLISHED_NOTHING when it committed nothing (a blocking check, held days),
# PUBLISHED_PARTLY when it committed some tables (late_data_sensor runs it again). A run killed has neither.
PUBLISHED_TAG = "exact_backfills/published"
# Set on a run that changed days which days of other tables, outside its own, are built from: late_data_sensor then
# launches the restatement that rewrites them (they are pending in the watermark).
LEFT_STALE_TAG = "exact_backfills/left_stale"
DAILY_RUN_TAG = "exact_backfills/daily_run"  # the day a daily run publishes, on its run
# Dagster's run priority (the queued run coordinator's public tag): a daily run goes ahead of a backfill's queued runs
# (priority 0), so a long backfill never makes yesterday miss its deadline.
PRIORITY_TAG = "dagster/priority"
DAILY_RUN_PRIORITY = "10"
PUBLISHED_NOTHING = "nothing"
PUBLISHED_PARTLY = "partly"


@functools.cache
def implicit_asset_job_name() -> str:
    """The name of the job Dagster runs the UI's backfills and materializations as (runs of it write the lake too):
    the job it makes for assets materialized without a job of their own, the same in every code location."""
    from dagster import AssetSpec, Definitions

    return Definitions(assets=[AssetSpec("any")]).resolve_implicit_global_asset_job_def().name
