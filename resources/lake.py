"""Where things live in the lake. Read from the environment on every call so one process can point at another lake."""

import os

from resources.settings import REPO_ROOT, settings
from resources.storage import join

__all__ = [
    "REPO_ROOT",
    "control_path",
    "lake_root",
    "landing_path",
    "plans_root",
    "private_files",
    "retired_path",
    "shadow_path",
    "table_path",
    "withdrawn_path",
]


def private_files() -> None:
    """Every file and folder this process (and what it starts) creates readable by its user alone, whatever umask it
    was started with: FILE_UMASK (Spark's writes through Hadoop take it too: resources/spark.py)."""
    os.umask(int(settings().file_umask, 8))


def lake_root() -> str:
    """The lake: an absolute local folder, or `s3a://bucket/prefix` on object storage (resources/storage.py)."""
    return settings().lake_root


def table_path(table: str, root: str | None = None) -> str:
    return join(root or lake_root(), "warehouse", table)


def landing_path(dataset: str, root: str | None = None) -> str:
    return join(root or lake_root(), "landing", dataset)


def control_path(pipeline: str, table: str, root: str | None = None) -> str:
    """A pipeline's control table (its watermark, holds, audit trail...): in a folder of the pipeline's own beside the
    tables, so that pipelines sharing a lake keep their own."""
    return join(root or lake_root(), "warehouse", "_control", pipeline, table)


def plans_root(root: str | None = None) -> str:
    """Where plans build their shadow tables: beside the published tables, read by no one but the plan's promotion."""
    return join(root or lake_root(), "warehouse", "_plans")


def shadow_path(plan_id: str, table: str) -> str:
    return join(plans_root(), plan_id, table)


def withdrawn_path(source: str, root: str | None = None) -> str:
    """Where `withdraw` keeps a source's withdrawn files and their notes."""
    return join(root or lake_root(), "withdrawn", source)


def retired_path(table: str, stamp: str, root: str | None = None) -> str:
    """Where `retire --archive` keeps a table no longer declared: beside the published tables, read by no one."""
    return join(root or lake_root(), "warehouse", "_retired", table, stamp)
