"""A copy of the project whose code differs, run against the same lake and instance: how the tests change code for
real (its modules are imported from the copy, not from the repository)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from resources.lake import REPO_ROOT
from resources.settings import settings


def project_with(copy: Path, module: str, old: str, new: str) -> Path:
    """A copy of the project at `copy` whose `module` (a path under the repository) has `old` replaced by `new`."""
    for package in ("assets_pkg", "resources"):
        shutil.copytree(REPO_ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dagster.yaml", "dagster-postgres.yaml", "workspace.yaml", "pyproject.toml"):  # the instance's
        shutil.copy(REPO_ROOT / name, copy / name)
    path = copy / module
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} is not in {module} exactly once"
    path.write_text(text.replace(old, new))
    return copy


def run_in(project: Path, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess:
    """`python *args` with `project`'s code, on this process's lake and instance unless `env` says otherwise."""
    environment = {**os.environ, "PYTHONPATH": str(project), "DELTA_JARS_DIR": settings().delta_jars_dir, **env}
    done = subprocess.run(
        [sys.executable, *args], cwd=project, env=environment, capture_output=True, text=True, timeout=900
    )
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done
