"""Where things live in the lake. Read from the environment on every call so one process can point at another lake."""

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def lake_root() -> Path:
    return Path(os.environ.get("LAKE_ROOT", REPO_ROOT / ".lake")).resolve()


def table_path(table: str, root: Path | None = None) -> str:
    return str((root or lake_root()) / "warehouse" / table)


def landing_path(dataset: str, root: Path | None = None) -> str:
    return str((root or lake_root()) / "landing" / dataset)
