"""The project's settings: one typed object, read from the environment and validated on every read with errors that
name the variable. Modules ask `settings()`, never the environment; the code location gives Dagster the same
object as its `settings` resource, so the UI's resources page shows the values a run uses.

Read from the environment on every call (parsed once per state of it) rather than once per process: a test (or a
command) may point one process at another lake."""

import functools
import json
import os
from datetime import date
from enum import Enum
from pathlib import Path
from typing import Any

from dagster import ConfigurableResource
from pydantic import Field

from resources.storage import on_object_store

REPO_ROOT = Path(__file__).resolve().parents[1]


class SettingsError(ValueError):
    pass


class Codegen(Enum):
    """How Spark evaluates expressions (SPARK_CODEGEN): compiled to Java code per query, interpreted, or chosen per
    write from what it reads."""

    AUTO = "auto"
    COMPILED = "1"
    INTERPRETED = "0"


class Settings(ConfigurableResource):
    """Every setting, with the environment variable it is read from."""

    lake_root: str = Field(
        description="LAKE_ROOT: the lake, a local folder or s3a://bucket/prefix; landing batches in landing/, Delta "
        "tables in warehouse/"
    )
    object_store_endpoint: str = Field(
        description="AWS_ENDPOINT_URL: the S3-compatible server of a lake on object storage (AWS itself when unset); "
        "its keys are read from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, never shown"
    )
    object_store_region: str = Field(description="AWS_REGION: the region of a lake on object storage")
    partition_start_date: str = Field(
        description="PARTITION_START_DATE: the first daily partition, in place of the pipeline's calendar's first day "
        "(unset: the pipeline's)"
    )
    partition_end_date: str = Field(
        description="PARTITION_END_DATE: the last daily partition, inclusive, in place of the pipeline's calendar's "
        "last day (unset: the pipeline's)"
    )
    backfill_max_partitions_per_run: int = Field(
        description="BACKFILL_MAX_PARTITIONS_PER_RUN: the most days one backfill run covers"
    )
    backfill_max_bytes_per_run: int = Field(
        description="BACKFILL_MAX_BYTES_PER_RUN: the most landed bytes the days of one backfill run hold: the days "
        "of a run are as many as the landing's batches hold within it"
    )
    watermark_reprocess_hours: float = Field(
        description="WATERMARK_REPROCESS_HOURS: batches landed this long before the watermark are read again"
    )
    restatement_window_days: int = Field(
        description="RESTATEMENT_WINDOW_DAYS: late rows on older days become exceptions instead of being restated"
    )
    rollback_horizon_days: int = Field(
        description="ROLLBACK_HORIZON_DAYS: how far back a rollback may restore: every table keeps its Delta log and "
        "the files of its older versions this long, the vacuum removes what is older, and a rollback beyond is refused"
    )
    late_data_sensor_interval_s: int = Field(
        description="LATE_DATA_SENSOR_INTERVAL_S: how often the sensor lists the landing"
    )
    check_row_count_tolerance: float = Field(
        description="CHECK_ROW_COUNT_TOLERANCE: largest relative change of a day's rows before row_count_change warns"
    )
    check_events_max_days: int = Field(
        description="CHECK_EVENTS_MAX_DAYS: above this many days a run records only failing check results day by day"
    )
    freshness_fail_window_h: float = Field(
        description="FRESHNESS_FAIL_WINDOW_H: a table not published for this many "
        "hours fails its freshness policy in Dagster"
    )
    spark_master: str = Field(description="SPARK_MASTER: the Spark master URL")
    spark_remote: str = Field(
        description="SPARK_REMOTE: a Spark Connect URL, replacing SPARK_MASTER when set (its token, if any, from "
        "SPARK_CONNECT_TOKEN_FILE rather than the URL)"
    )
    spark_connect_token_file: str = Field(
        description="SPARK_CONNECT_TOKEN_FILE: a file (readable by its user alone) holding the token the Spark Connect "
        "server of SPARK_REMOTE asks for"
    )
    file_umask: str = Field(
        description="FILE_UMASK: the permissions every file and folder the project writes leaves out (077: its user "
        "alone reads them; 027 lets its group read them too)"
    )
    spark_driver_memory: str = Field(description="SPARK_DRIVER_MEMORY: the driver's memory in local mode")
    spark_conf: str = Field(description="SPARK_CONF: a JSON object of extra Spark settings")
    spark_verbose: bool = Field(
        description="SPARK_VERBOSE: 1 shows Spark's warnings on the terminal too: a local driver's, or the warm "
        "engine's errors a command receives (always in the Spark log: the engine's, or LAKE_ROOT/logs/spark.log)"
    )
    spark_short_runs: bool = Field(
        description="SPARK_SHORT_RUNS: 1 starts every local driver, and the application of the cluster "
        "scripts/spark-cluster.sh starts, as for a short run (their JVMs' quick compiler only), as the tests do: for "
        "small lakes"
    )
    spark_codegen: str = Field(
        description="SPARK_CODEGEN: auto has Spark evaluate a write's expressions interpreted when it reads little "
        "(compiling Java code for each query then costs more than its rows) and compiled otherwise; 1 always compiles; "
        "0 never does, as the tests' small lakes"
    )
    spark_engine: str = Field(
        description="SPARK_ENGINE: warm (a local Spark Connect server kept running between processes: "
        "resources/engine.py) or in-process (a local driver started by each process)"
    )
    spark_engine_home: str = Field(description="SPARK_ENGINE_HOME: the warm engine's state and log")
    delta_jars_dir: str = Field(description="DELTA_JARS_DIR: the Delta jars and the project's local file system jar")

    @property
    def warm_engine(self) -> bool:
        """Spark runs on the warm engine: local mode (no cluster, no Connect server of the user's) with SPARK_ENGINE
        warm."""
        return not self.spark_remote and self.spark_master.startswith("local") and self.spark_engine == "warm"

    @property
    def object_store(self) -> bool:
        """Spark reaches object storage: the lake is there, or an S3 server is named (AWS_ENDPOINT_URL), whose lakes a
        local one can be compared with."""
        return on_object_store(self.lake_root) or bool(self.object_store_endpoint)

    @property
    def local_root(self) -> Path:
        """What the lake keeps on a local disk (a local driver's log, generated inputs): the lake itself when it is a
        local folder; for a lake on object storage, a folder of the repository's."""
        if on_object_store(self.lake_root):
            return REPO_ROOT / ".lake-local"
        return Path(self.lake_root)

    @property
    def profile(self) -> str:
        """Where the Spark work runs: "embedded" (local mode, on the warm engine or a driver in each process) or
        "cluster"."""
        return "cluster" if self.spark_remote or not self.spark_master.startswith("local") else "embedded"

    @property
    def codegen(self) -> Codegen:
        return Codegen(self.spark_codegen)

    @property
    def extra_spark_conf(self) -> dict[str, str]:
        return json.loads(self.spark_conf)

    def shown(self) -> "Settings":
        """The settings as Dagster shows them (the UI's resources page): those that may hold a secret (SPARK_CONF, an
        object store's keys; SPARK_REMOTE, a token) as the variable they are read from, not their value. A new object:
        a copy would keep the original values in the state Dagster shows."""
        values = self.model_dump()
        for field in SECRET_FIELDS:
            values[field] = f"({ENVIRONMENT[field][0]}: not shown)" if values[field] else ""
        return Settings(**values)


# field -> (environment variable, default)
ENVIRONMENT = {
    "lake_root": ("LAKE_ROOT", str(REPO_ROOT / ".lake")),
    "object_store_endpoint": ("AWS_ENDPOINT_URL", ""),
    "object_store_region": ("AWS_REGION", ""),
    "partition_start_date": ("PARTITION_START_DATE", ""),  # unset: the pipeline's calendar (calendar.py)
    "partition_end_date": ("PARTITION_END_DATE", ""),
    "backfill_max_partitions_per_run": ("BACKFILL_MAX_PARTITIONS_PER_RUN", "3660"),
    "backfill_max_bytes_per_run": ("BACKFILL_MAX_BYTES_PER_RUN", str(2 * 2**30)),
    "watermark_reprocess_hours": ("WATERMARK_REPROCESS_HOURS", "72"),
    "restatement_window_days": ("RESTATEMENT_WINDOW_DAYS", "90"),
    "rollback_horizon_days": ("ROLLBACK_HORIZON_DAYS", "30"),
    "late_data_sensor_interval_s": ("LATE_DATA_SENSOR_INTERVAL_S", "10"),
    "check_row_count_tolerance": ("CHECK_ROW_COUNT_TOLERANCE", "0.5"),
    "check_events_max_days": ("CHECK_EVENTS_MAX_DAYS", "3660"),
    "freshness_fail_window_h": ("FRESHNESS_FAIL_WINDOW_H", "26"),
    "spark_master": ("SPARK_MASTER", "local[2]"),
    "spark_remote": ("SPARK_REMOTE", ""),
    "spark_connect_token_file": ("SPARK_CONNECT_TOKEN_FILE", ""),
    "file_umask": ("FILE_UMASK", "077"),
    "spark_driver_memory": ("SPARK_DRIVER_MEMORY", "4g"),
    "spark_conf": ("SPARK_CONF", "{}"),
    "spark_verbose": ("SPARK_VERBOSE", "0"),
    "spark_short_runs": ("SPARK_SHORT_RUNS", "0"),
    "spark_codegen": ("SPARK_CODEGEN", "auto"),
    "spark_engine": ("SPARK_ENGINE", "warm"),
    "spark_engine_home": ("SPARK_ENGINE_HOME", str(REPO_ROOT / ".engine")),
    "delta_jars_dir": ("DELTA_JARS_DIR", str(REPO_ROOT / ".jars")),
}

ENGINES = ("warm", "in-process")

# The settings that may hold a secret: never shown, logged or put on a command line.
SECRET_FIELDS = ("spark_remote", "spark_conf")

_POSITIVE = {
    "backfill_max_partitions_per_run",
    "backfill_max_bytes_per_run",
    "restatement_window_days",
    "late_data_sensor_interval_s",
    "check_events_max_days",
    "freshness_fail_window_h",
}
_NOT_NEGATIVE = {"watermark_reprocess_hours", "check_row_count_tolerance"}
MIN_ROLLBACK_HORIZON_DAYS = 7


def _parsed(field: str, raw: str) -> Any:
    variable = ENVIRONMENT[field][0]
    kind = Settings.model_fields[field].annotation
    try:
        if field.endswith("_date"):
            if raw:
                date.fromisoformat(raw)
            return raw
        if kind is bool:
            if raw not in ("0", "1"):
                raise ValueError
            return raw == "1"
        if field == "spark_engine" and raw not in ENGINES:
            raise ValueError
        if field == "spark_codegen":
            return Codegen(raw).value
        if field == "spark_conf":
            if not isinstance(json.loads(raw), dict):
                raise ValueError
            return raw
        if field == "lake_root" and "://" in raw:
            if not on_object_store(raw) or not raw[len("s3a://") :].split("/")[0]:
                raise ValueError
            return raw
        if field == "object_store_endpoint" and raw and not raw.startswith(("http://", "https://")):
            raise ValueError
        if field == "file_umask":
            if len(raw) != 3 or any(c not in "01234567" for c in raw) or raw[-1] != "7":
                raise ValueError
            return raw
        value = kind(raw)  # type: ignore[misc]  # int or float: the annotation of a numeric field
    except ValueError:
        expected = {
            "partition_start_date": "a YYYY-MM-DD date",
            "partition_end_date": "a YYYY-MM-DD date",
            "spark_conf": "a JSON object",
            "spark_verbose": "0 or 1",
            "spark_short_runs": "0 or 1",
            "spark_codegen": " or ".join(c.value for c in Codegen),
            "spark_engine": " or ".join(ENGINES),
            "lake_root": "a local folder or s3a://bucket/prefix",
            "object_store_endpoint": "an http:// or https:// URL",
            "file_umask": "three octal digits ending in 7 (others never read the lake), such as 077 or 027",
        }.get(field, f"a{'n integer' if kind is int else ' number'}")
        shown = " (its value not shown)" if field in SECRET_FIELDS else f"={raw!r}"
        raise SettingsError(f"{variable}{shown} is not {expected}") from None
    if field == "rollback_horizon_days" and value < MIN_ROLLBACK_HORIZON_DAYS:
        # Delta's VACUUM refuses to keep less than 7 days (a writer may still be reading older files)
        raise SettingsError(f"{variable}={raw!r} must be at least {MIN_ROLLBACK_HORIZON_DAYS} (days)")
    if field in _POSITIVE and value <= 0 or field in _NOT_NEGATIVE and value < 0:
        raise SettingsError(f"{variable}={raw!r} must be {'above' if field in _POSITIVE else 'at least'} 0")
    return value


def settings() -> Settings:
    """The settings from the environment, validated: a SettingsError names the variable and what it must be."""
    return _settings_of(tuple(os.environ.get(variable) for variable, _ in ENVIRONMENT.values()), os.getcwd())


# Read in loops over days and rows: parsed once per state of the environment (which the tests change) and working
# folder (a relative LAKE_ROOT), not per call.
@functools.lru_cache(maxsize=8)
def _settings_of(raw: tuple[str | None, ...], cwd: str) -> Settings:
    values = {
        field: _parsed(field, value or default)
        for (field, (_, default)), value in zip(ENVIRONMENT.items(), raw, strict=True)
    }
    lake = values["lake_root"]
    values["lake_root"] = lake.rstrip("/") if on_object_store(lake) else str(Path(lake).resolve())
    values["spark_engine_home"] = str(Path(values["spark_engine_home"]).resolve())
    start, end = values["partition_start_date"], values["partition_end_date"]
    if start and end and date.fromisoformat(end) < date.fromisoformat(start):
        raise SettingsError(
            f"PARTITION_END_DATE={values['partition_end_date']} is before "
            f"PARTITION_START_DATE={values['partition_start_date']}"
        )
    return Settings(**values)
