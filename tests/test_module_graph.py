"""The package's shape, read from its source with `ast` (nothing imported): no import cycle between the modules of
assets_pkg and resources, deferred imports inside functions included; and tables.py, the spec, is the one module
that names a table (transforms.py holds the SQL of the tables' columns)."""

import ast
from pathlib import Path

from resources.lake import REPO_ROOT

PACKAGES = ("exact_backfills", "assets_pkg", "resources")
# The tables the landing first reaches, by every spelling a module would name them with.
TABLE_NAMES = ("stg_order_items", "STG_ORDER_ITEMS", "quarantine_order_items", "QUARANTINE_ORDER_ITEMS")
NAMING_TABLES = {"tables.py", "transforms.py"}


def modules() -> dict[str, Path]:
    """Every module of the packages, by its dotted name (a package by its own)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).glob("*.py")):
            found[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> dict[str, int]:
    """The modules of `known` that module `name` imports, anywhere in it (at the top, in a function, in a branch),
    each with the line of its first import."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up `level - 1` packages
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            # `from package import module` imports the module; `from module import name`, the module.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        for target in targets:
            if target in known and target != name:
                found.setdefault(target, node.lineno)
    return found


def import_graph() -> dict[str, dict[str, int]]:
    found = modules()
    return {name: imports(name, path, set(found)) for name, path in found.items()}


def find_cycle(graph: dict[str, dict[str, int]] | dict[str, set[str]]) -> list[str]:
    """A cycle of the graph, as the modules along it back to the first ([] when there is none)."""
    done: set[str] = set()
    for root in sorted(graph):
        if root in done:
            continue
        path, on_path = [root], {root}
        stack = [iter(sorted(graph[root]))]
        while stack:
            following = next(stack[-1], None)
            if following is None:
                stack.pop()
                done.add(path[-1])
                on_path.discard(path.pop())
            elif following in on_path:
                return [*path[path.index(following) :], following]
            elif following not in done:
                path.append(following)
                on_path.add(following)
                stack.append(iter(sorted(graph.get(following, ()))))
    return []


def test_the_modules_import_one_another_without_a_cycle():
    graph = import_graph()
    cycle = find_cycle(graph)
    assert not cycle, (
        "import cycle: "
        + " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False))
        + f" -> {cycle[-1]}"
    )


def test_the_import_graph_sees_imports_at_the_top_and_deferred_into_functions():
    graph = import_graph()
    assert "exact_backfills.publish" in graph["exact_backfills.late_data"]  # `from exact_backfills.publish import ...`
    assert "exact_backfills.landing" in graph["exact_backfills.late_data"]  # `from exact_backfills import landing, ...`
    assert "resources.control" in graph["exact_backfills.late_data"]  # `from resources import control`
    # `_cmd_rollback` imports the rollback module when the command runs, not when the CLI is imported.
    cli = ast.parse((REPO_ROOT / "exact_backfills" / "cli.py").read_text())
    top_level = {n.module for n in cli.body if isinstance(n, ast.ImportFrom)}
    assert "exact_backfills.rollback" not in top_level and "exact_backfills.rollback" in graph["exact_backfills.cli"]


def test_a_cycle_is_named_along_its_modules():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) == []


def test_only_the_spec_names_a_table():
    naming = []
    for path in sorted((REPO_ROOT / "assets_pkg").glob("*.py")):
        if path.name in NAMING_TABLES:
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            naming += [f"assets_pkg/{path.name}:{number}: {name}" for name in TABLE_NAMES if name in line]
    assert not naming, (
        "a module other than the spec (tables.py) names a table; derive it from tables.TABLES:\n" + "\n".join(naming)
    )
