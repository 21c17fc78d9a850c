"""The checks as objects: each result is made by its family's constructor in the checks package, and Dagster's check
results are built there alone (read from the source with `ast`)."""

import ast
from pathlib import Path

from resources.lake import REPO_ROOT

DAGSTER_RESULTS = {"AssetCheckResult", "AssetCheckEvaluation"}
CHECKED = ("exact_backfills", "assets_pkg")
CHECKS_PACKAGE = Path("exact_backfills") / "checks"


def dagster_results_built(root: Path) -> list[str]:
    """Where, outside the checks package, a Dagster check result is constructed: `file:line name`."""
    found = []
    for package in CHECKED:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root)
            if relative.is_relative_to(CHECKS_PACKAGE):
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call):
                    called = node.func
                    name = called.id if isinstance(called, ast.Name) else getattr(called, "attr", "")
                    if name in DAGSTER_RESULTS:
                        found.append(f"{relative}:{node.lineno} {name}")
    return found


def test_dagster_check_results_are_built_in_the_checks_package_alone():
    assert dagster_results_built(REPO_ROOT) == []
    # What it looks for is there: the checks package builds both.
    package = "\n".join(p.read_text() for p in (REPO_ROOT / CHECKS_PACKAGE).glob("*.py"))
    assert all(f"{name}(" in package for name in DAGSTER_RESULTS)
