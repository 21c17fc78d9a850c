"""A copy of the project whose code differs, run against the same lake and instance: how the tests change code for
real (its modules are imported from the copy, not from the repository)."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from bench.harness import FACT_NET_REWRITTEN, FEATURE_ROUNDING_FIX, TRANSFORMS, Edit, project_with
from exact_backfills.dagster_names import CODE_CHECK_JOB
from resources.settings import settings

# The code's check of what built each day (a `run_commands` statement), as its sensor launches it.
CHECK_CODE_VERSIONS = {
    "python": "from dagster import DagsterInstance; from exact_backfills.definitions import defs; "
    f"assert defs.resolve_job_def({CODE_CHECK_JOB!r}).execute_in_process(instance=DagsterInstance.get()).success"
}

# A mart gains a column: the most frequent change of shape.
MAX_QUANTITY = Edit(
    TRANSFORMS,
    '_money_sum("cost_amount"),\n    )',
    '_money_sum("cost_amount"),\n        F.max("quantity").alias("max_quantity"),\n    )',
)


def run_in(project: Path, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess:
    """`python *args` with `project`'s code, on this process's lake and instance unless `env` says otherwise."""
    environment = {**os.environ, "PYTHONPATH": str(project), "DELTA_JARS_DIR": settings().delta_jars_dir, **env}
    done = subprocess.run(
        [sys.executable, *args], cwd=project, env=environment, capture_output=True, text=True, timeout=900
    )
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


class Said(NamedTuple):
    """What one command of a copy said: its exit code, and what it printed."""

    code: int
    out: str
    err: str


# Runs each command in one process of the copy (one Spark session for all): a list of argv for the command line, in
# which "{plan_id}" stands for the id the last `plan --json` printed, or {"python": code} for a statement; prints what
# each said as JSON on its last line; then it ends as a command does (exact_backfills/cli/ending.py).
_DRIVER = """
import contextlib, io, json, sys
from exact_backfills.cli import main
from exact_backfills.cli.ending import end
said, plan_id = [], ""
for command in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        if isinstance(command, dict):
            exec(command["python"], {})
            code = 0
        else:
            code = main([arg.replace("{plan_id}", plan_id) for arg in command])
    if isinstance(command, list) and "plan" in command and "--json" in command:
        plan_id = json.loads(out.getvalue())["plan_id"]
    said.append([code, out.getvalue(), err.getvalue()])
print(json.dumps(said))
end(0)
"""


def run_commands(project: Path, *commands: list[str] | dict[str, str], **env: str) -> list[Said]:
    """Each command in turn, in one process of `project`'s code (one JVM): what each said."""
    done = run_in(project, "-c", _DRIVER, json.dumps(list(commands)), **env)
    return [Said(*said) for said in json.loads(done.stdout.strip().splitlines()[-1])]


__all__ = ["FACT_NET_REWRITTEN", "FEATURE_ROUNDING_FIX", "MAX_QUANTITY", "TRANSFORMS", "Edit", "project_with"]
